// The client: Allow and Record over breakerd's HTTP/JSON API, guard around
// a tool call, and the fallback while no daemon answers.
import * as otel from "./otel.js";
import { OpenCache } from "./cache.js";
import { CircuitOpenError, ConfigError, UnreachableError } from "./errors.js";
import { CALL_OPTIONS, GUARD_OPTIONS, RECORD_OPTIONS, checkCallOptions, checkClientOptions, checkName, checkPermit, evidenceOf } from "./check.js";
import { evidenceOfError, evidenceOfResponse, isResponse } from "./evidence.js";
import { DEFAULT_LOCAL_POLICY, LocalBreaker, effectOfOutcome, localEffect, localPolicy } from "./fallback.js";
import { fallbackDenial, retryAfterOf, storeDenial } from "./denial.js";
import { renderToolResult } from "./render.js";
import { DEFAULT_SAVINGS_INTERVAL_MS, Savings } from "./savings.js";
import { Reach } from "./reach.js";
import { fromEnvironment } from "./env.js";
import { keepAliveFetch } from "./keepalive.js";
import { FastView, plainSuccess } from "./fast.js";
import { Transport, parseURLs } from "./transport.js";
import { int64, } from "./wire.js";
/**
 * EXCLUDED_OUTCOME is what an excluded error is recorded as:
 * OUTCOME_INVALID_ARGUMENT (the request was wrong, not the dependency),
 * which never counts and never ends a failure run.
 */
export const EXCLUDED_OUTCOME = "OUTCOME_INVALID_ARGUMENT";
/** FAST_NOT_SENT is a fast-mode success's RecordResult.why: it would have changed nothing in breakerd. */
export const FAST_NOT_SENT = "not sent: the breaker is closed with no failure run (fast mode)";
/** The Allow budget when allowBudgetMs is not given, ms. */
const DEFAULT_ALLOW_BUDGET_MS = 100;
/** MAX_KNOWN bounds how many breakers the client remembers the last known state of. */
const MAX_KNOWN = 4096;
/** warn is the default onError: one line on the console. */
/** letsThrough is whether an Allow answer is breakerd's ALLOWED (not a degraded daemon's). */
function letsThrough(res) {
    return (res.decision ?? "DECISION_ALLOWED") === "DECISION_ALLOWED" && !res.degraded;
}
function warn(err) {
    console.warn(`breakerd: ${err instanceof Error ? err.message : String(err)}`);
}
/** The decisions that let a call go out. */
function allows(d) {
    return d === "DECISION_ALLOWED" || d === "DECISION_PROBE";
}
/**
 * Client asks breakerd before each tool call and tells it the outcome
 * after. It is safe for concurrent use; close() ends its event stream.
 */
export class Client {
    workerId;
    transport;
    clock;
    o;
    cache;
    local;
    saved;
    policies = new Map();
    /** The breakers on which this worker has seen a success: its credential worked there (a later 401 is a revocation). */
    worked = new Set();
    answered = false;
    /** The first-contact budget is spent once per client. */
    firstSpent = false;
    /** No daemon answered the last call. */
    unanswered = false;
    /** Answers from any daemon so far (a refusal, a re-probe's too): a call that fails after one came that it began before says nothing of now. */
    heard = 0;
    known = new Map();
    reach;
    onError;
    rpcTimeoutMs;
    /** The keep-alive fetch the client made for itself (none when given one): close ends its connections. */
    keepAlive;
    /** Fast mode's view; undefined in strict mode. */
    fastView;
    constructor(o) {
        checkClientOptions(o);
        const env = fromEnvironment(o.urls, o.token);
        const urls = parseURLs(env.urls);
        this.keepAlive = o.fetch ? undefined : keepAliveFetch();
        const given = o.fetch ?? this.keepAlive?.fetch ?? globalThis.fetch;
        if (typeof given !== "function")
            throw new ConfigError("fetch", "no fetch: Node 18 or later, or pass one");
        const f = (input, init) => given(input, init); // called unbound, as a browser's fetch must be
        this.o = o;
        this.onError = o.onError ?? warn;
        this.rpcTimeoutMs = o.rpcTimeoutMs ?? 2000;
        this.workerId = o.workerId;
        this.clock = o.clock ?? Date.now;
        // A daemon that did not answer is asked again on this client's clock.
        this.transport = new Transport({
            urls,
            token: env.token,
            fetch: f,
            unary: this.keepAlive?.unary,
            skipAfterMs: o.allowBudgetMs ?? DEFAULT_ALLOW_BUDGET_MS,
            clock: this.clock,
            probe: { method: "BatchGet", body: { breakers: [], worker_id: o.workerId } },
            probeTimeoutMs: this.rpcTimeoutMs,
        });
        const breakers = Array.isArray(o.watch) ? o.watch : undefined;
        const view = (this.fastView = o.fast ? new FastView(breakers) : undefined);
        this.cache = new OpenCache({ transport: this.transport, workerId: o.workerId, clock: this.clock, breakers, onError: this.onError, heartbeatMs: o.watchHeartbeatMs,
            runNotices: o.fast, onState: view && ((st) => view.learn(st)), onEvent: view && ((ev) => view.event(ev)) });
        this.reach = new Reach({ urls: urls.map((u) => u.href).join(", "), probe: () => this.reprobe(), onError: this.onError, clock: this.clock });
        this.local = new LocalBreaker(this.clock, (b) => this.policies.get(b) ?? DEFAULT_LOCAL_POLICY);
        this.saved = new Savings((reports) => this.transport.call("ReportSavings", { worker_id: this.workerId, reports }, { budgetMs: this.rpcTimeoutMs }), o.savingsIntervalMs ?? DEFAULT_SAVINGS_INTERVAL_MS, this.onError);
        this.saved.start();
        if (o.watch || o.fast)
            this.cache.start();
    }
    /**
     * degraded says the client answers from what it last heard: no daemon
     * answered its last call, or the watch stream it follows is not live.
     */
    get degraded() {
        return this.unanswered || this.cache.degraded;
    }
    /** The open cache: which breakers deny, as breakerd last said (for inspection and tests). */
    get openCache() {
        return this.cache;
    }
    /** What the client saved and has not reported yet, and what breakerd took (for inspection and tests; Run counts its removals here). */
    get savings() {
        return this.saved;
    }
    /**
     * flushSavings reports now what the client saved since its last report
     * (one ReportSavings call per 1,024 breakers). Resolves false when no
     * daemon answered: the counts stay for the next report. A report
     * breakerd refuses (a breaker the token may not name) is dropped and
     * its APIError thrown.
     */
    flushSavings() {
        return this.saved.flush();
    }
    /**
     * close sends what the client saved since its last report (best
     * effort), ends the event stream and closes the client's connections:
     * a call still out is answered as when no daemon answers (an Allow by
     * the fallback, a Record by the local breaker). A call made after
     * close opens connections anew, with no stream and no savings report.
     */
    async close() {
        this.reach.close();
        await this.saved.close();
        await this.cache.stop();
        this.keepAlive?.close();
    }
    /** down says no daemon answers this client now: calls answer from the fallback without waiting. */
    get down() {
        return this.reach.down;
    }
    /**
     * check resolves when a breakerd daemon answers this client, with its
     * token, and rejects otherwise, naming the cause (no daemon at any URL,
     * not breakerd's API, a refused token). Call it at start to fail
     * loudly where the fallback would answer quietly.
     */
    async check() {
        try {
            await this.rpc("BatchGet", { breakers: [], worker_id: this.workerId }, this.rpcTimeoutMs);
        }
        catch (err) {
            if (!(err instanceof UnreachableError))
                throw err;
            const urls = this.transport.urls.map((u) => u.href).join(", ");
            throw new UnreachableError(`no breakerd answers at ${urls}: ${err.message} (is the daemon's HTTP API on? go run ./cmd/breakerd --http-listen 127.0.0.1:7071)`, err.causes);
        }
    }
    /** reprobe is one cheap authenticated call: did any daemon answer? */
    async reprobe() {
        try {
            await this.transport.call("BatchGet", { breakers: [], worker_id: this.workerId }, { budgetMs: this.rpcTimeoutMs });
        }
        catch (err) {
            if (err instanceof UnreachableError)
                return false;
        }
        this.heard++; // Reach takes the client up again
        return true;
    }
    /**
     * learnState takes a breaker's state from any daemon answer, in time or
     * late: the open cache and the last known denial (bounded). A state
     * breakerd says denies (its denial, or a deny_until_ms) is held until
     * that deny-until, and its probe is due after it; one that does not deny
     * leaves what was held (a breaker whose probe is due denies no more, yet
     * was denying); an Allow breakerd answered ALLOWED (allowed) forgets it.
     */
    learnState(st, allowed = false) {
        this.cache.learn(st);
        const name = st?.breaker;
        if (!st || !name)
            return;
        const held = this.known.get(name);
        const until = Math.max(int64(st.deny_until_ms), int64(st.denial?.deny_until_ms));
        this.known.delete(name);
        if (allowed || (!held && until === 0 && !st.denial))
            return;
        const asOf = int64(st.as_of_ms);
        const untilMs = until === 0 ? (held?.untilMs ?? 0) : asOf > 0 ? this.clock() + (until - asOf) : until;
        this.known.set(name, { untilMs, generation: String(st.generation ?? "0") });
        if (this.known.size > MAX_KNOWN)
            this.known.delete(this.known.keys().next().value);
    }
    /**
     * budget is how long allow waits for a daemon: the first-contact budget
     * on the client's first call only; the RPC timeout at a breaker last
     * known open whose probe is due (only a daemon can grant the one
     * probe); else the Allow budget.
     */
    budget(breaker = "") {
        const b = this.o.allowBudgetMs ?? DEFAULT_ALLOW_BUDGET_MS;
        const first = !this.firstSpent && !this.answered;
        this.firstSpent = true;
        if (first)
            return Math.max(b, this.o.firstContactBudgetMs ?? 1000);
        const k = this.known.get(breaker);
        if (k && k.untilMs <= this.clock())
            return Math.max(b, this.rpcTimeoutMs);
        return b;
    }
    /** rpc calls method with failover and notes that a daemon answered. */
    async rpc(method, body, budgetMs, signal) {
        const before = this.heard;
        let res;
        try {
            res = await this.transport.call(method, body, { budgetMs, signal });
        }
        catch (err) {
            if (!(err instanceof UnreachableError))
                this.hear(); // a refusal is an answer
            else if (this.heard === before) {
                // Unless a daemon answered another call meanwhile: then this one's
                // failure (a connection closed under it, a stall it waited out)
                // says nothing of now, and the client stays up.
                this.unanswered = true;
                if (budgetMs >= this.rpcTimeoutMs && !signal?.aborted)
                    this.reach.failed(err); // gone, not slow
            }
            throw err;
        }
        this.answered = true;
        this.unanswered = false;
        this.hear();
        return res;
    }
    /** hear notes that a daemon answered: the client is up. */
    hear() {
        this.heard++;
        this.reach.answered();
    }
    /**
     * allow asks whether a call to breaker may go out. A denial is a Permit
     * with allowed false. When no daemon answers within the Allow budget,
     * the fallback answers (degraded): the open cache's denial, else the
     * local breaker's verdict. Throws APIError (a refused name, a bad
     * token: AuthError) and ProtocolError (not breakerd), never answered
     * by the fallback, and the caller's abort reason.
     */
    async allow(breaker, opts = {}) {
        const p = await this.ask(breaker, opts);
        otel.decision(p); // on the active span, when the application traces
        return p;
    }
    async ask(breaker, opts) {
        checkName("breaker", breaker);
        checkCallOptions(opts, CALL_OPTIONS);
        const tool = opts.tool ?? "";
        if (this.cache.status.connected) {
            // A live stream's cache answers a known denial with no round trip.
            const cached = this.cache.lookup(breaker);
            if (cached) {
                this.saved.add(breaker, 1, 0);
                return this.cachedDenial(this.denialBase(breaker, tool || breaker, false), cached);
            }
        }
        if (this.fastView) {
            this.fastView.use(breaker);
            const f = this.fastView.allow(breaker, this.cache.status.connected);
            if (f)
                return this.fastPermit(breaker, tool || breaker, f.ticket, f.state);
        }
        if (this.reach.down) {
            this.reach.poll();
            return this.fallbackAllow(breaker, tool || breaker);
        }
        const budget = this.budget(breaker);
        // The call goes on for the RPC timeout; allow waits its budget. A late
        // answer still teaches the client, and its ticket goes with the Record.
        const req = { breaker, worker_id: this.workerId };
        if (tool)
            req.tool = tool;
        if (!this.policies.has(breaker))
            req.with_policy = true; // the fallback's policy comes with the answer
        const call = this.rpc("Allow", req, Math.max(budget, this.rpcTimeoutMs), opts.signal);
        const res = await raceBudget(call, budget).catch((err) => {
            if (err instanceof UnreachableError)
                return undefined;
            throw err;
        });
        if (res === undefined || res === LATE) {
            const given = this.fallbackAllow(breaker, tool || breaker);
            if (res === LATE)
                void call.then((late) => this.lateAllow(late, given), () => undefined);
            return given;
        }
        this.local.reset();
        this.learnAnswer(breaker, res);
        return this.permitOf(res, breaker, tool || breaker);
    }
    /** learnAnswer keeps what a daemon's Allow answer tells of breaker: its state, and its policy when asked for. */
    learnAnswer(breaker, res) {
        this.learnState(res.state, letsThrough(res));
        if (res.policy)
            this.policies.set(breaker, localPolicy(res.policy));
    }
    /** fastPermit is the ALLOWED permit fast mode's view gives a healthy breaker. */
    fastPermit(breaker, tool, ticket, state) {
        return { breaker, tool, decision: "DECISION_ALLOWED", allowed: true, ticket, retryAfterMs: 0, reason: "", state, degraded: false, scope: "",
            alternatives: [], toolResult: "", denial: undefined, local: undefined, fast: true };
    }
    /** permitOf is the permit of a daemon's Allow answer: its denial is stored as the daemon decided and worded it. */
    permitOf(res, breaker, tool) {
        const now = this.clock();
        const decision = res.decision ?? "DECISION_ALLOWED";
        const allowed = allows(decision);
        const alternatives = res.state?.alternatives ?? [];
        const degraded = res.degraded ?? false;
        const denial = allowed ? undefined : storeDenial(res.denial ?? { decision, reason: res.reason ?? "" }, int64(res.state?.as_of_ms), now);
        return {
            breaker,
            tool,
            decision,
            allowed,
            ticket: res.ticket ?? {},
            retryAfterMs: int64(res.retry_after_ms),
            reason: res.reason ?? denial?.reason ?? "",
            state: res.state,
            degraded,
            scope: res.scope ?? "",
            alternatives,
            toolResult: res.tool_result || (denial ? renderToolResult({ tool, denial, alternatives, degraded }, now) : ""),
            denial,
            local: undefined,
        };
    }
    /**
     * lateAllow takes a daemon's Allow answer that came after the
     * fallback's: what it says of the breaker is learned; its ticket goes
     * with the Record of a call the fallback let out, and a probe lease the
     * fallback's denial leaves unused is released at once.
     */
    lateAllow(res, given) {
        this.learnAnswer(given.breaker, res);
        if (!res.ticket)
            return;
        if (given.allowed)
            given.late = { ticket: res.ticket };
        else if (res.decision === "DECISION_PROBE") {
            void this.sendRecord({ breaker: given.breaker, worker_id: this.workerId, ticket: res.ticket, evidence: { error_kind: "ERROR_KIND_CANCELLED" } });
        }
    }
    /** sendRecord sends a Record in the background: the fleet gets the evidence the fallback took too. */
    async sendRecord(req) {
        try {
            const res = await this.rpc("Record", req, this.rpcTimeoutMs);
            this.learnState(res.state);
        }
        catch (err) {
            if (!(err instanceof UnreachableError))
                this.onError(err);
        }
    }
    /** fallbackAllow answers while no daemon does. */
    fallbackAllow(breaker, tool) {
        const base = this.denialBase(breaker, tool, true);
        const cached = this.cache.lookup(breaker);
        if (cached)
            return this.cachedDenial(base, cached);
        if (this.o.fallback === "closed")
            return this.denied(base, fallbackDenial("open", 0, this.clock()));
        // Last known open, its probe due: one call of this client's goes, the
        // rest wait for its outcome.
        if (this.known.has(breaker))
            this.local.holdOpen(breaker);
        const v = this.local.allow(breaker);
        if (v.allowed) {
            const decision = v.probe ? "DECISION_PROBE" : "DECISION_ALLOWED";
            return { ...base, decision, allowed: true, retryAfterMs: 0, reason: "", denial: undefined, local: { probe: v.probe } };
        }
        return this.denied(base, fallbackDenial(v.probeInFlight ? "probe_in_flight" : "open", v.retryAfterMs, this.clock()));
    }
    denialBase(breaker, tool, degraded) {
        return { breaker, tool, ticket: {}, state: undefined, degraded, scope: "", alternatives: [], toolResult: "" };
    }
    cachedDenial(base, c) {
        return this.denied({ ...base, scope: c.parent, alternatives: c.alternatives }, c.denial);
    }
    /** denied is the permit of a stored denial, its tool result rendered now. */
    denied(base, denial) {
        const now = this.clock();
        const toolResult = renderToolResult({ tool: base.tool, denial, alternatives: base.alternatives, degraded: base.degraded }, now);
        return { ...base, decision: denial.decision, allowed: false, retryAfterMs: retryAfterOf(denial, now), reason: denial.reason, toolResult, denial, local: undefined };
    }
    /**
     * record tells breakerd what the call the permit granted returned: its
     * raw evidence, which breakerd classifies ({}, undefined or null: a
     * success). A permit of the fallback, or a Record no daemon takes, goes
     * to the local breaker. Throws APIError for a request breakerd refuses,
     * and, before any round trip, for a permit that is not one, evidence
     * that is not an object, or a malformed option (naming it).
     */
    async record(permit, evidence, opts = {}) {
        checkPermit(permit);
        checkCallOptions(opts, RECORD_OPTIONS);
        const r = await this.send(permit, evidenceOf(evidence), opts);
        otel.outcome(r); // on the active span, when the application traces
        return r;
    }
    async send(permit, evidence, opts) {
        const ticket = permit.late?.ticket ?? (permit.local ? { generation: this.known.get(permit.breaker)?.generation ?? "0" } : permit.ticket);
        // The id makes the Record count once however often it is sent (the next daemon tried, the background).
        const req = { breaker: permit.breaker, worker_id: this.workerId, ticket, record_id: crypto.randomUUID() };
        if (opts.outcome)
            req["outcome"] = opts.outcome;
        else
            req["evidence"] = evidence;
        const effect = opts.outcome ? effectOfOutcome(opts.outcome) : localEffect(evidence, opts.deadlineMs);
        if (this.worked.has(permit.breaker))
            req["credential_worked"] = true;
        if (opts.latencyMs !== undefined)
            req["latency_ms"] = String(Math.max(0, Math.round(opts.latencyMs)));
        if (opts.deadlineMs !== undefined)
            req["deadline_ms"] = String(Math.max(0, Math.round(opts.deadlineMs)));
        if (this.fastView && !permit.local && !permit.late && !permit.ticket.lease_token && !this.reach.down) {
            if (!opts.outcome && plainSuccess(evidence) && this.fastView.skip(permit.breaker, ticket, opts.latencyMs, this.cache.status.connected)) {
                return { counted: false, classifiedAs: "", why: FAST_NOT_SENT, degraded: false };
            }
            if (effect === "count")
                this.fastView.failed(permit.breaker, ticket); // its next successes must reach breakerd
        }
        if (permit.local || this.reach.down) {
            // The fallback takes it, and the daemons still get it, in the background.
            this.local.record(permit.breaker, effect, permit.local?.probe ?? false);
            if (permit.local?.probe && effect === "success")
                this.known.delete(permit.breaker);
            void this.sendRecord(req);
            return { counted: false, classifiedAs: "", why: "taken by the local fallback (breakerd unreachable)", degraded: true };
        }
        try {
            const res = await this.rpc("Record", req, this.rpcTimeoutMs, opts.signal);
            this.learnState(res.state);
            if (res.classified_as === "OUTCOME_SUCCESS")
                this.worked.add(permit.breaker);
            return { counted: res.counted ?? false, classifiedAs: res.classified_as ?? "", why: res.why ?? res.note ?? "", degraded: res.degraded ?? false };
        }
        catch (err) {
            if (!(err instanceof UnreachableError))
                throw err;
            this.local.record(permit.breaker, effect, false);
            return { counted: false, classifiedAs: "", why: "taken by the local fallback (breakerd unreachable)", degraded: true };
        }
    }
    /**
     * guard runs fn as one guarded call: allow (a denial throws
     * CircuitOpenError carrying the tool_result), fn, and record of what
     * fn returned or threw (evidenceOfError, evidenceOfResponse), then
     * returns fn's value or re-throws its error. A fetch Response that fn
     * returns is evidence too (its status and wait headers), and is
     * returned as it is. A malformed option is refused (APIError naming
     * it) before allow, so fn never runs.
     */
    async guard(breaker, fn, opts = {}) {
        checkCallOptions(opts, GUARD_OPTIONS);
        const p = await this.allow(breaker, opts);
        if (!p.allowed)
            throw denialError(p);
        return this.runWith(p, fn, opts);
    }
    /**
     * runWith runs fn under a permit allow granted, and records what it
     * returned or threw, as guard does after its allow (its options
     * checked before fn runs).
     */
    async runWith(p, fn, opts = {}) {
        checkPermit(p);
        checkCallOptions(opts, GUARD_OPTIONS);
        const start = this.clock();
        let value;
        try {
            value = await fn();
        }
        catch (err) {
            const excluded = this.excludes(err, opts.exclude);
            await this.settle(p, excluded ? {} : evidenceOfError(err, { signal: opts.signal }), start, opts, excluded ? EXCLUDED_OUTCOME : undefined);
            throw err;
        }
        await this.settle(p, isResponse(value) ? evidenceOfResponse(value) : {}, start, opts);
        return value;
    }
    /**
     * excludes reports whether err is not the dependency's fault: exclude
     * (one call's) or the client's exclude option says so. Such an error is
     * recorded as never counted.
     */
    excludes(err, exclude) {
        return (exclude?.(err) || this.o.exclude?.(err)) ?? false;
    }
    /** settle records a guarded call's evidence (or outcome); a failure to record never replaces the call's own result. */
    async settle(p, ev, start, opts, outcome) {
        if (opts.deadlineMs === undefined && (ev.http_status ?? 0) >= 400)
            ev = { ...ev, no_deadline: true };
        try {
            await this.record(p, ev, { outcome, latencyMs: this.clock() - start, deadlineMs: opts.deadlineMs });
        }
        catch (err) {
            this.onError(err);
        }
    }
    /** get returns one breaker's state. Throws UnreachableError when no daemon answers: it has no fallback. */
    async get(breaker, opts = {}) {
        checkName("breaker", breaker);
        checkCallOptions(opts, CALL_OPTIONS);
        const res = await this.rpc("Get", { breaker }, this.o.rpcTimeoutMs ?? 2000, opts.signal);
        const st = res.state ?? { breaker };
        this.learnState(st);
        return st;
    }
    /** getPolicy returns the policy in effect for breaker. Throws UnreachableError when no daemon answers. */
    async getPolicy(breaker, opts = {}) {
        checkName("breaker", breaker);
        checkCallOptions(opts, CALL_OPTIONS);
        const res = await this.rpc("GetPolicy", { breaker }, this.o.rpcTimeoutMs ?? 2000, opts.signal);
        return res.policy ?? {};
    }
    /**
     * states returns the named breakers' states in one BatchGet within the
     * Allow budget (with this worker's id, so a suspect worker sees its own
     * denial), or undefined when no daemon answered.
     */
    async states(breakers, opts = {}) {
        breakers.forEach((b, i) => checkName(`breakers[${i}]`, b));
        checkCallOptions(opts, CALL_OPTIONS);
        if (breakers.length === 0)
            return [];
        if (this.reach.down)
            return undefined; // the fallback answers at once
        try {
            const res = await this.rpc("BatchGet", { breakers, worker_id: this.workerId }, this.budget(), opts.signal);
            this.local.reset();
            for (const st of res.states ?? [])
                this.learnState(st);
            return res.states ?? [];
        }
        catch (err) {
            if (err instanceof UnreachableError)
                return undefined; // the loss is said once (Reach)
            throw err;
        }
    }
    /** fallbackState is the fallback's verdict on a breaker, as a permit that takes no probe slot. */
    fallbackVerdict(breaker, tool) {
        const base = { breaker, tool, ticket: {}, state: undefined, degraded: true, scope: "", alternatives: [], toolResult: "" };
        const cached = this.cache.lookup(breaker);
        if (cached)
            return this.cachedDenial(base, cached);
        const v = this.local.peek(breaker);
        if (!v)
            return undefined;
        return this.denied(base, fallbackDenial(v.probeInFlight ? "probe_in_flight" : "open", v.retryAfterMs, this.clock()));
    }
}
/** LATE is raceBudget's answer when the budget ran out first. */
const LATE = Symbol("late");
/** raceBudget resolves with the call's answer, or LATE when budgetMs passes first (the call goes on). */
async function raceBudget(call, budgetMs) {
    let timer;
    const late = new Promise((resolve) => (timer = setTimeout(() => resolve(LATE), budgetMs)));
    try {
        return await Promise.race([call, late]);
    }
    finally {
        clearTimeout(timer);
    }
}
/** denialError is the CircuitOpenError for a denied permit. */
export function denialError(p) {
    return new CircuitOpenError({
        breaker: p.breaker,
        tool: p.tool,
        decision: p.decision,
        reason: p.reason,
        retryAfterMs: p.retryAfterMs,
        alternatives: p.alternatives,
        scope: p.scope,
        forced: p.denial?.forced ?? false,
        degraded: p.degraded,
        toolResult: p.toolResult,
        denial: p.denial,
    });
}
