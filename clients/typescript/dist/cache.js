// The open-breaker cache: which breakers deny, how and until when, as
// breakerd said (each state's denial, decided and worded by the daemon's
// read rule). A map lookup; no breaker rule lives here. It is fed by every answer the client gets
// and by the daemon's event stream (GET /v1/watch, Server-Sent Events),
// and answers while no daemon does.
import { denialOfState } from "./denial.js";
import { readSSE } from "./sse.js";
import { causeText } from "./transport.js";
import { int64 } from "./wire.js";
/** DEFAULT_HEARTBEAT_MS is the interval assumed of a daemon that announces none (the daemon's default). */
export const DEFAULT_HEARTBEAT_MS = 15_000;
/** A stream silent for this many heartbeat intervals is dropped (docs/reliability.md). */
const MISSED_HEARTBEATS = 3;
/** STALE_VIEW_MS bounds how long a denial learned before the stream went quiet is answered while it stays quiet. */
export const STALE_VIEW_MS = 60_000;
/** OpenCache keeps the denying breakers. */
export class OpenCache {
    o;
    deny = new Map();
    /** The last stream id seen per breaker: events are delivered at least once, duplicates dropped. */
    seen = new Map();
    lastEventId = "";
    abort;
    connected = false;
    snapshots = 0;
    loop;
    /** Breakers an event named without saying until when they deny: read afresh in one BatchGet. */
    stale = new Set();
    refreshing;
    /** The parts of a snapshot read so far (a snapshot may come in several). */
    parts;
    /** The interval the daemon announced (or the default): a stream silent for 3 of them is dropped. */
    heartbeatMs;
    /** When the stream was last heard while live; 0 before. */
    heardMs = 0;
    /** Streams dropped for their silence (for tests and logs). */
    stalls = 0;
    constructor(o) {
        this.o = o;
        this.heartbeatMs = o.heartbeatMs ?? DEFAULT_HEARTBEAT_MS;
    }
    /**
     * lookup returns the breaker's denial while it lasts. While the stream
     * is not live (it was asked for and is dropped or stalled), a denial
     * learned more than STALE_VIEW_MS ago is not answered: the view is no
     * longer heard (a force lifted meanwhile must not deny for ever).
     */
    lookup(breaker) {
        const d = this.deny.get(breaker);
        if (!d)
            return undefined;
        const now = this.o.clock();
        if (d.denial.untilMs <= now) {
            this.deny.delete(breaker);
            return undefined;
        }
        if (this.loop && !this.connected && now - Math.max(d.learnedMs, this.heardMs) > STALE_VIEW_MS)
            return undefined;
        return d;
    }
    /** degraded says the stream was asked for and is not live: the view is what was last heard. */
    get degraded() {
        return this.loop !== undefined && !this.connected;
    }
    /**
     * learn takes a state breakerd returned (Allow, Get, BatchGet, a
     * snapshot or an event): the denial it holds for this worker, or none.
     */
    learn(st) {
        const name = st?.breaker;
        if (!st || !name)
            return;
        this.o.onState?.(st);
        const now = this.o.clock();
        const denial = denialOfState(st, this.o.workerId, now);
        if (!denial || denial.untilMs <= now) {
            this.deny.delete(name);
            return;
        }
        const parent = denial.scope === "parent" ? (st.parent ?? "") : "";
        this.deny.set(name, { breaker: name, denial, alternatives: st.alternatives ?? [], parent, learnedMs: now });
    }
    /** size is how many breakers the cache holds as denying (expired ones included until looked up). */
    get size() {
        return this.deny.size;
    }
    /** status says whether the stream is live and how many snapshots it has read. */
    get status() {
        return { connected: this.connected, snapshots: this.snapshots, lastEventId: this.lastEventId };
    }
    /** start opens the event stream (reconnecting until stop). */
    start() {
        if (this.loop)
            return;
        this.abort = new AbortController();
        this.loop = this.run(this.abort.signal);
    }
    /** stop closes the stream and waits for its loop to end. */
    async stop() {
        this.abort?.abort();
        await this.loop;
        this.loop = undefined;
    }
    async run(signal) {
        const base = this.o.retryMs ?? 100;
        let wait = base;
        let i = 0;
        let told = false; // a run of failures is told once
        while (!signal.aborted) {
            const urls = this.o.transport.urls;
            const url = urls[i % urls.length];
            try {
                const got = await this.stream(url, signal);
                if (got)
                    wait = base;
                if (got)
                    told = false;
            }
            catch (err) {
                if (signal.aborted)
                    break;
                if (!told || this.connected)
                    this.o.onError?.(err); // a live stream's drop is news again
                told = true;
            }
            this.connected = false;
            i++; // the next daemon, or the same again when there is one
            await sleep(wait, signal);
            wait = Math.min(wait * 2, 5000);
        }
    }
    /** stream reads one connection to its end; true when it got at least one event. */
    async stream(base, signal) {
        const url = new URL("v1/watch", base);
        for (const b of this.o.breakers ?? [])
            url.searchParams.append("breaker", b);
        if (this.o.runNotices)
            url.searchParams.set("run_notices", "true");
        const extra = { accept: "text/event-stream" };
        if (this.lastEventId)
            extra["last-event-id"] = this.lastEventId;
        const own = new AbortController(); // the silence watch's, and the caller's stop
        const stop = () => own.abort(signal.reason);
        signal.addEventListener("abort", stop);
        let timer;
        const heard = () => {
            if (this.connected)
                this.heardMs = this.o.clock();
            clearTimeout(timer);
            const quiet = MISSED_HEARTBEATS * this.heartbeatMs;
            timer = setTimeout(() => {
                this.stalls++;
                own.abort(new Error(`watch ${url.href}: nothing heard for ${quiet} ms (${MISSED_HEARTBEATS} heartbeat intervals); reconnecting`));
            }, quiet);
        };
        try {
            heard(); // the wait for the answer's headers is bounded too
            const res = await this.o.transport.fetch(url, { headers: this.o.transport.headers(extra), signal: own.signal, redirect: "manual" });
            const ctype = res.headers.get("content-type") ?? "";
            if (!res.ok || !ctype.startsWith("text/event-stream") || !res.body) {
                await res.body?.cancel().catch(() => undefined);
                throw new Error(`HTTP ${res.status} ${ctype}`);
            }
            let got = false;
            for await (const m of readSSE(res.body, heard)) {
                got = true;
                this.take(m.event, m.data, m.id);
                heard(); // again: a snapshot may have announced another interval
            }
            return got;
        }
        catch (err) {
            throw own.signal.aborted && !signal.aborted ? own.signal.reason : watchError(url, err);
        }
        finally {
            clearTimeout(timer);
            signal.removeEventListener("abort", stop);
            this.parts = undefined;
        }
    }
    /** take applies one stream event. */
    take(event, data, id) {
        let msg;
        try {
            msg = data === "" ? {} : JSON.parse(data);
        }
        catch {
            this.o.onError?.(new Error(`watch: event ${event} is not JSON`));
            return;
        }
        if (event === "resync") {
            // Events were lost: the breakers named are read afresh; with none
            // named, the next connection starts over with a snapshot.
            const named = isObj(msg) && Array.isArray(msg["breakers"]) ? msg["breakers"].filter((b) => typeof b === "string") : [];
            if (named.length > 0)
                this.refresh(named);
            else {
                this.lastEventId = "";
                this.seen.clear();
            }
            return;
        }
        if (event === "snapshot") {
            this.snapshotPart(msg);
            if (id)
                this.lastEventId = id;
            return;
        }
        const ev = (isObj(msg) && isObj(msg["event"]) ? msg["event"] : msg);
        const breaker = typeof ev["breaker"] === "string" ? ev["breaker"] : "";
        if (breaker && id.startsWith(breaker + "/")) {
            const sid = id.slice(breaker.length + 1);
            const last = this.seen.get(breaker);
            if (last && !after(sid, last))
                return; // a duplicate of a replay
            this.seen.set(breaker, sid);
        }
        if (id)
            this.lastEventId = id;
        if (this.o.onEvent?.(ev))
            return;
        const state = ev["state"];
        if (isObj(state)) {
            this.learn(state);
        }
        else if (breaker) {
            this.refresh([breaker]); // the event says something changed, not what it denies
        }
    }
    /** refresh reads the named breakers' states afresh (one BatchGet for every name gathered meanwhile). */
    refresh(names) {
        for (const n of names)
            this.stale.add(n);
        if (this.refreshing)
            return;
        this.refreshing = (async () => {
            while (this.stale.size > 0) {
                const batch = [...this.stale].slice(0, 1024);
                for (const n of batch)
                    this.stale.delete(n);
                try {
                    const res = await this.o.transport.call("BatchGet", { breakers: batch, worker_id: this.o.workerId }, { budgetMs: 2000 });
                    for (const st of res.states ?? [])
                        this.learn(st);
                }
                catch (err) {
                    this.o.onError?.(err);
                }
            }
            this.refreshing = undefined;
        })();
    }
    /** settled resolves once the reads afresh that events asked for are done (for tests). */
    async settled() {
        while (this.refreshing)
            await this.refreshing;
    }
    /**
     * snapshotPart takes one part of the opening snapshot: its states are
     * gathered until the part without `more: true`, which replaces the view
     * and makes the stream live. A part may announce the heartbeat interval
     * (`heartbeat_ms`, a number or an int64 string).
     */
    snapshotPart(msg) {
        const list = Array.isArray(msg)
            ? msg
            : isObj(msg)
                ? (msg["states"] ?? msg["breakers"] ?? [])
                : [];
        const hb = isObj(msg) ? int64(msg["heartbeat_ms"]) : 0;
        if (hb > 0)
            this.heartbeatMs = hb;
        this.parts = [...(this.parts ?? []), ...list];
        if (isObj(msg) && msg["more"] === true)
            return;
        const all = this.parts;
        this.parts = undefined;
        if (!this.o.breakers?.length)
            this.deny.clear();
        for (const st of all)
            if (isObj(st))
                this.learn(st);
        this.snapshots++;
        this.connected = true;
        this.heardMs = this.o.clock();
    }
}
/** watchError is a stream's failure naming its URL and the cause's own words (fetch's "fetch failed" hides ECONNREFUSED in its cause). */
function watchError(url, err) {
    return new Error(`watch ${url.href}: ${causeText(err)}`, { cause: err });
}
function isObj(v) {
    return typeof v === "object" && v !== null && !Array.isArray(v);
}
/** after compares Redis Stream ids ("<ms>-<seq>"): a later than b. */
function after(a, b) {
    const [am = "0", as = "0"] = a.split("-");
    const [bm = "0", bs = "0"] = b.split("-");
    if (am.length !== bm.length)
        return am.length > bm.length;
    if (am !== bm)
        return am > bm;
    if (as.length !== bs.length)
        return as.length > bs.length;
    return as > bs;
}
function sleep(ms, signal) {
    return new Promise((resolve) => {
        if (signal.aborted)
            return resolve();
        const t = setTimeout(done, ms);
        function done() {
            clearTimeout(t);
            signal.removeEventListener("abort", done);
            resolve();
        }
        signal.addEventListener("abort", done);
    });
}
