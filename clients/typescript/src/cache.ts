// The open-breaker cache: which breakers deny, and until when, as breakerd
// said (deny_until_ms, computed by the daemon's read rule). A map lookup;
// no breaker rule lives here. It is fed by every answer the client gets
// and by the daemon's event stream (GET /v1/watch, Server-Sent Events),
// and answers while no daemon does.

import { readSSE } from "./sse.js";
import type { Transport } from "./transport.js";
import { int64, type BreakerState } from "./wire.js";

/** The largest int64: deny_until_ms's "until an operator acts". */
const FOREVER = "9223372036854775807";

/** CachedDenial is what the cache knows of one denying breaker. */
export interface CachedDenial {
  breaker: string;
  /** Until when it denies, on this process's clock (ms since the epoch); Infinity: until an operator acts. */
  untilMs: number;
  reason: string;
  alternatives: string[];
  forced: boolean;
  scope: string;
}

/** untilLocal moves a breakerd time onto the local clock: the daemon's clock read `asOf` when ours read `now`. */
function untilLocal(denyUntil: string | undefined, asOf: number, now: number): number {
  if (denyUntil === FOREVER) return Infinity;
  const d = int64(denyUntil);
  if (d <= 0) return 0;
  return asOf > 0 ? now + (d - asOf) : d;
}

export interface OpenCacheOptions {
  transport: Transport;
  clock: () => number;
  /** Only these breakers' events; every breaker's when empty. */
  breakers?: readonly string[] | undefined;
  /** How long to wait before reconnecting a dropped stream, ms (doubles to 5 s). Default 100. */
  retryMs?: number | undefined;
  /** Told of each stream failure (for logs); the stream reconnects regardless. */
  onError?: ((err: unknown) => void) | undefined;
}

/** OpenCache keeps the denying breakers. */
export class OpenCache {
  private readonly deny = new Map<string, CachedDenial>();
  /** The last stream id seen per breaker: events are delivered at least once, duplicates dropped. */
  private readonly seen = new Map<string, string>();
  private lastEventId = "";
  private abort: AbortController | undefined;
  private connected = false;
  private snapshots = 0;
  private loop: Promise<void> | undefined;

  constructor(private readonly o: OpenCacheOptions) {}

  /** lookup returns the breaker's denial while it lasts. */
  lookup(breaker: string): CachedDenial | undefined {
    const d = this.deny.get(breaker);
    if (!d) return undefined;
    if (d.untilMs > this.o.clock()) return d;
    this.deny.delete(breaker);
    return undefined;
  }

  /** learn takes a state breakerd returned (Allow, Get, BatchGet, a snapshot or an event). */
  learn(st: BreakerState | undefined, asOfMs?: number): void {
    const name = st?.breaker;
    if (!st || !name) return;
    const now = this.o.clock();
    const until = untilLocal(st.deny_until_ms, asOfMs ?? int64(st.as_of_ms), now);
    if (until <= now) {
      this.deny.delete(name);
      return;
    }
    this.deny.set(name, {
      breaker: name,
      untilMs: until,
      reason: st.reason ?? "",
      alternatives: st.alternatives ?? [],
      forced: st.state === "STATE_FORCED_OPEN" && !!st.forced_by,
      // A closed breaker that denies is denied by its parent scope.
      scope: st.parent && (!st.state || st.state === "STATE_CLOSED") ? st.parent : "",
    });
  }

  /** size is how many breakers the cache holds as denying (expired ones included until looked up). */
  get size(): number {
    return this.deny.size;
  }

  /** status says whether the stream is live and how many snapshots it has read. */
  get status(): { connected: boolean; snapshots: number; lastEventId: string } {
    return { connected: this.connected, snapshots: this.snapshots, lastEventId: this.lastEventId };
  }

  /** start opens the event stream (reconnecting until stop). */
  start(): void {
    if (this.loop) return;
    this.abort = new AbortController();
    this.loop = this.run(this.abort.signal);
  }

  /** stop closes the stream and waits for its loop to end. */
  async stop(): Promise<void> {
    this.abort?.abort();
    await this.loop;
    this.loop = undefined;
  }

  private async run(signal: AbortSignal): Promise<void> {
    const base = this.o.retryMs ?? 100;
    let wait = base;
    let i = 0;
    while (!signal.aborted) {
      const urls = this.o.transport.urls;
      const url = urls[i % urls.length]!;
      try {
        const got = await this.stream(url, signal);
        if (got) wait = base;
      } catch (err) {
        if (signal.aborted) break;
        this.o.onError?.(err);
      }
      this.connected = false;
      i++; // the next daemon, or the same again when there is one
      await sleep(wait, signal);
      wait = Math.min(wait * 2, 5000);
    }
  }

  /** stream reads one connection to its end; true when it got at least one event. */
  private async stream(base: URL, signal: AbortSignal): Promise<boolean> {
    const url = new URL("v1/watch", base);
    for (const b of this.o.breakers ?? []) url.searchParams.append("breaker", b);
    const extra: Record<string, string> = { accept: "text/event-stream" };
    if (this.lastEventId) extra["last-event-id"] = this.lastEventId;
    const res = await this.o.transport.fetch(url, { headers: this.o.transport.headers(extra), signal });
    const ctype = res.headers.get("content-type") ?? "";
    if (!res.ok || !ctype.startsWith("text/event-stream") || !res.body) {
      await res.body?.cancel().catch(() => undefined);
      throw new Error(`watch ${url.href}: HTTP ${res.status} ${ctype}`);
    }
    this.connected = true;
    let got = false;
    for await (const m of readSSE(res.body)) {
      got = true;
      this.take(m.event, m.data, m.id);
    }
    return got;
  }

  /** take applies one stream event. */
  private take(event: string, data: string, id: string): void {
    if (event === "resync") {
      // The position is gone from the log: start over with a snapshot.
      this.lastEventId = "";
      this.seen.clear();
      return;
    }
    let msg: unknown;
    try {
      msg = JSON.parse(data);
    } catch {
      this.o.onError?.(new Error(`watch: event ${event} is not JSON`));
      return;
    }
    if (event === "snapshot") {
      this.snapshot(msg);
      if (id) this.lastEventId = id;
      return;
    }
    const ev = (isObj(msg) && isObj(msg["event"]) ? msg["event"] : msg) as Record<string, unknown>;
    const breaker = typeof ev["breaker"] === "string" ? ev["breaker"] : "";
    const sid = id.slice(breaker.length + 1);
    if (breaker && id.startsWith(breaker + "/")) {
      const last = this.seen.get(breaker);
      if (last && !after(sid, last)) return; // a duplicate of a replay
      this.seen.set(breaker, sid);
    }
    if (id) this.lastEventId = id;
    const state = ev["state"];
    if (isObj(state)) {
      this.learn(state as BreakerState, int64(state["as_of_ms"] as string) || int64(ev["at_ms"] as string));
      return;
    }
    this.learn(
      { breaker, deny_until_ms: ev["deny_until_ms"] as string, reason: ev["reason"] as string, state: ev["to"] as BreakerState["state"] },
      int64(ev["at_ms"] as string),
    );
  }

  private snapshot(msg: unknown): void {
    const list = Array.isArray(msg)
      ? msg
      : isObj(msg)
        ? ((msg["states"] ?? msg["breakers"] ?? []) as unknown[])
        : [];
    if (!this.o.breakers?.length) this.deny.clear();
    for (const st of list) if (isObj(st)) this.learn(st as BreakerState);
    this.snapshots++;
  }
}

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** after compares Redis Stream ids ("<ms>-<seq>"): a later than b. */
function after(a: string, b: string): boolean {
  const [am = "0", as = "0"] = a.split("-");
  const [bm = "0", bs = "0"] = b.split("-");
  if (am.length !== bm.length) return am.length > bm.length;
  if (am !== bm) return am > bm;
  if (as.length !== bs.length) return as.length > bs.length;
  return as > bs;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done);
  });
}
