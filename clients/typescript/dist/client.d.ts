import { OpenCache } from "./cache.js";
import { CircuitOpenError } from "./errors.js";
import { type StoredDenial } from "./denial.js";
import { Savings } from "./savings.js";
import { FastView } from "./fast.js";
import { type BreakerState, type Decision, type Evidence, type Policy, type Ticket } from "./wire.js";
/**
 * ClientOptions configure a Client. Only workerId is required; urls too
 * when BREAKERD_URL is unset. Each is checked when the Client is made: a
 * malformed option, or a key that is none of these, is a ConfigError
 * naming it; one left undefined takes its default.
 */
export interface ClientOptions {
    /** One breakerd HTTP URL or several ("http://127.0.0.1:7071"): another is tried within the budget when one does not answer. Default: BREAKERD_URL (comma-separated). */
    urls?: string | readonly string[] | undefined;
    /** The bearer token, when the daemons require one. Default: BREAKERD_TOKEN; "" for none. */
    token?: string | undefined;
    /** This worker's id: the quorum counts distinct workers. */
    workerId: string;
    /** How long allow (and Run.available) wait for breakerd before the fallback answers, ms. Default 100. */
    allowBudgetMs?: number | undefined;
    /** The budget of the calls before any daemon has answered (a first connection), ms. Default 1000. */
    firstContactBudgetMs?: number | undefined;
    /** The bound on record, get and getPolicy, ms. Default 2000. */
    rpcTimeoutMs?: number | undefined;
    /** What allow answers while no daemon does: "local" (the default; the open cache, then a local breaker) or "closed" (deny). */
    fallback?: "local" | "closed" | undefined;
    /**
     * Follow the daemons' event stream (GET /v1/watch) into the open cache,
     * so that the fallback knows every breaker the fleet holds open, not
     * only those this worker was told of; while the stream is live, allow
     * answers a breaker the cache holds denying with no round trip. Holds a
     * connection open until
     * close(). true: every breaker; a list: those breakers. Default false.
     */
    watch?: boolean | readonly string[] | undefined;
    /**
     * How often the client reports what it saved (the denials its live
     * open cache answered, the tools its runs left out) to breakerd, ms.
     * Default 10000; 0 or less: never (nothing is counted).
     */
    savingsIntervalMs?: number | undefined;
    /**
     * Fast mode (docs/typescript.md#fast-mode): a healthy breaker's Allow is
     * answered in-process from the watch stream's view, and a success that
     * could change nothing is not sent. Follows the watch stream (every
     * breaker, or those `watch` names). Default false (strict).
     */
    fast?: boolean | undefined;
    /** The fetch to use. Default: on Node, one over node:http's keep-alive agent (docs/typescript.md#keep-alive); elsewhere the platform's. */
    fetch?: typeof fetch | undefined;
    /** The clock, ms since the epoch. Default Date.now. */
    clock?: (() => number) | undefined;
    /**
     * The watch stream's heartbeat interval to assume until the daemon
     * announces one, ms: a stream that hears nothing for 3 intervals is
     * dropped and reconnected. Default 15000 (the daemon's default).
     */
    watchHeartbeatMs?: number | undefined;
    /**
     * Told of what the client absorbs: no daemon answering (once per loss),
     * a watch stream that dropped (once per run of failures), a Record
     * that breakerd refused. Default: a warning on the console.
     */
    onError?: ((err: unknown) => void) | undefined;
    /**
     * Says which errors a guarded function throws are not the dependency's
     * fault (a validation error of the tool's own, say): such an error is
     * recorded as EXCLUDED_OUTCOME, which never counts, and re-thrown. A
     * call's own `exclude` (GuardOptions) is asked first. Default: none.
     */
    exclude?: ((err: unknown) => boolean) | undefined;
}
/**
 * EXCLUDED_OUTCOME is what an excluded error is recorded as:
 * OUTCOME_INVALID_ARGUMENT (the request was wrong, not the dependency),
 * which never counts and never ends a failure run.
 */
export declare const EXCLUDED_OUTCOME = "OUTCOME_INVALID_ARGUMENT";
/** Permit is breakerd's answer to allow: a decision, never an exception. */
export interface Permit {
    breaker: string;
    /** The tool's name as the model knows it (the breaker's when none was given). */
    tool: string;
    decision: Decision;
    /** The call may go out (ALLOWED or PROBE). */
    allowed: boolean;
    /** Pass back to record (it is, by guard). */
    ticket: Ticket;
    /** For a denial: how long until asking again can help, ms. */
    retryAfterMs: number;
    reason: string;
    /** The breaker's state as breakerd answered it; undefined from the fallback. */
    state: BreakerState | undefined;
    /** The answer came from this worker's fallback (no daemon answered), or from a daemon without Redis. */
    degraded: boolean;
    /** The parent scope that denied; "" when the breaker itself decided. */
    scope: string;
    /** For a denial: the routes the breaker's policy offers instead. */
    alternatives: string[];
    /** For a denial: the text a model receives as the tool's output. */
    toolResult: string;
    /** For a denial: the denial as breakerd decided and worded it (or the fallback's own), on this process's clock. */
    denial: StoredDenial | undefined;
    /** The fallback's answer (how record treats the ticket): undefined when breakerd answered. */
    local: {
        probe: boolean;
    } | undefined;
    /** The daemon's ticket when its answer came after the fallback's (record sends it). */
    late?: {
        ticket: Ticket;
    } | undefined;
    /** Fast mode's view answered (no round trip). */
    fast?: boolean | undefined;
}
/** FAST_NOT_SENT is a fast-mode success's RecordResult.why: it would have changed nothing in breakerd. */
export declare const FAST_NOT_SENT = "not sent: the breaker is closed with no failure run (fast mode)";
/** RecordResult is what record learned. */
export interface RecordResult {
    /** The outcome moved the breaker. */
    counted: boolean;
    /** What breakerd classified the evidence as (an Outcome name); "" when the fallback took it. */
    classifiedAs: string;
    /** Why, in plain words. */
    why: string;
    /** breakerd did not take it: the local fallback did. */
    degraded: boolean;
}
/** CallOptions are a single call's options. */
export interface CallOptions {
    /** The tool's name as the model knows it: denials name it. */
    tool?: string | undefined;
    /** The caller's signal: aborting it ends the wait for breakerd, and a call it aborted is recorded as cancelled. */
    signal?: AbortSignal | undefined;
}
/** GuardOptions are guard's options. */
export interface GuardOptions extends CallOptions {
    /** The caller's remaining deadline, ms: a Retry-After beyond it counts. Absent: no deadline (a rate limit never counts). */
    deadlineMs?: number | undefined;
    /** This call's errors that are not the dependency's fault (ClientOptions.exclude, asked before the client's). */
    exclude?: ((err: unknown) => boolean) | undefined;
}
/** Options of record. */
export interface RecordOptions {
    /** An Outcome name sent instead of the evidence (EXCLUDED_OUTCOME for an excluded error); breakerd takes it as it is. */
    outcome?: string | undefined;
    latencyMs?: number | undefined;
    deadlineMs?: number | undefined;
    signal?: AbortSignal | undefined;
}
/**
 * Client asks breakerd before each tool call and tells it the outcome
 * after. It is safe for concurrent use; close() ends its event stream.
 */
export declare class Client {
    readonly workerId: string;
    private readonly transport;
    private readonly clock;
    private readonly o;
    private readonly cache;
    private readonly local;
    private readonly saved;
    private readonly policies;
    /** The breakers on which this worker has seen a success: its credential worked there (a later 401 is a revocation). */
    private readonly worked;
    private answered;
    /** The first-contact budget is spent once per client. */
    private firstSpent;
    /** No daemon answered the last call. */
    private unanswered;
    /** Answers from any daemon so far (a refusal, a re-probe's too): a call that fails after one came that it began before says nothing of now. */
    private heard;
    private readonly known;
    private readonly reach;
    private readonly onError;
    private readonly rpcTimeoutMs;
    /** The keep-alive fetch the client made for itself (none when given one): close ends its connections. */
    private readonly keepAlive;
    /** Fast mode's view; undefined in strict mode. */
    readonly fastView: FastView | undefined;
    constructor(o: ClientOptions);
    /**
     * degraded says the client answers from what it last heard: no daemon
     * answered its last call, or the watch stream it follows is not live.
     */
    get degraded(): boolean;
    /** The open cache: which breakers deny, as breakerd last said (for inspection and tests). */
    get openCache(): OpenCache;
    /** What the client saved and has not reported yet, and what breakerd took (for inspection and tests; Run counts its removals here). */
    get savings(): Savings;
    /**
     * flushSavings reports now what the client saved since its last report
     * (one ReportSavings call per 1,024 breakers). Resolves false when no
     * daemon answered: the counts stay for the next report. A report
     * breakerd refuses (a breaker the token may not name) is dropped and
     * its APIError thrown.
     */
    flushSavings(): Promise<boolean>;
    /**
     * close sends what the client saved since its last report (best
     * effort), ends the event stream and closes the client's connections:
     * a call still out is answered as when no daemon answers (an Allow by
     * the fallback, a Record by the local breaker). A call made after
     * close opens connections anew, with no stream and no savings report.
     */
    close(): Promise<void>;
    /** down says no daemon answers this client now: calls answer from the fallback without waiting. */
    get down(): boolean;
    /**
     * check resolves when a breakerd daemon answers this client, with its
     * token, and rejects otherwise, naming the cause (no daemon at any URL,
     * not breakerd's API, a refused token). Call it at start to fail
     * loudly where the fallback would answer quietly.
     */
    check(): Promise<void>;
    /** reprobe is one cheap authenticated call: did any daemon answer? */
    private reprobe;
    /**
     * learnState takes a breaker's state from any daemon answer, in time or
     * late: the open cache and the last known denial (bounded). A state
     * breakerd says denies (its denial, or a deny_until_ms) is held until
     * that deny-until, and its probe is due after it; one that does not deny
     * leaves what was held (a breaker whose probe is due denies no more, yet
     * was denying); an Allow breakerd answered ALLOWED (allowed) forgets it.
     */
    private learnState;
    /**
     * budget is how long allow waits for a daemon: the first-contact budget
     * on the client's first call only; the RPC timeout at a breaker last
     * known open whose probe is due (only a daemon can grant the one
     * probe); else the Allow budget.
     */
    private budget;
    /** rpc calls method with failover and notes that a daemon answered. */
    private rpc;
    /** hear notes that a daemon answered: the client is up. */
    private hear;
    /**
     * allow asks whether a call to breaker may go out. A denial is a Permit
     * with allowed false. When no daemon answers within the Allow budget,
     * the fallback answers (degraded): the open cache's denial, else the
     * local breaker's verdict. Throws APIError (a refused name, a bad
     * token: AuthError) and ProtocolError (not breakerd), never answered
     * by the fallback, and the caller's abort reason.
     */
    allow(breaker: string, opts?: CallOptions): Promise<Permit>;
    private ask;
    /** learnAnswer keeps what a daemon's Allow answer tells of breaker: its state, and its policy when asked for. */
    private learnAnswer;
    /** fastPermit is the ALLOWED permit fast mode's view gives a healthy breaker. */
    private fastPermit;
    /** permitOf is the permit of a daemon's Allow answer: its denial is stored as the daemon decided and worded it. */
    private permitOf;
    /**
     * lateAllow takes a daemon's Allow answer that came after the
     * fallback's: what it says of the breaker is learned; its ticket goes
     * with the Record of a call the fallback let out, and a probe lease the
     * fallback's denial leaves unused is released at once.
     */
    private lateAllow;
    /** sendRecord sends a Record in the background: the fleet gets the evidence the fallback took too. */
    private sendRecord;
    /** fallbackAllow answers while no daemon does. */
    private fallbackAllow;
    private denialBase;
    private cachedDenial;
    /** denied is the permit of a stored denial, its tool result rendered now. */
    private denied;
    /**
     * record tells breakerd what the call the permit granted returned: its
     * raw evidence, which breakerd classifies ({}, undefined or null: a
     * success). A permit of the fallback, or a Record no daemon takes, goes
     * to the local breaker. Throws APIError for a request breakerd refuses,
     * and, before any round trip, for a permit that is not one, evidence
     * that is not an object, or a malformed option (naming it).
     */
    record(permit: Permit, evidence?: Evidence | null, opts?: RecordOptions): Promise<RecordResult>;
    private send;
    /**
     * guard runs fn as one guarded call: allow (a denial throws
     * CircuitOpenError carrying the tool_result), fn, and record of what
     * fn returned or threw (evidenceOfError, evidenceOfResponse), then
     * returns fn's value or re-throws its error. A fetch Response that fn
     * returns is evidence too (its status and wait headers), and is
     * returned as it is. A malformed option is refused (APIError naming
     * it) before allow, so fn never runs.
     */
    guard<T>(breaker: string, fn: () => T | Promise<T>, opts?: GuardOptions): Promise<T>;
    /**
     * runWith runs fn under a permit allow granted, and records what it
     * returned or threw, as guard does after its allow (its options
     * checked before fn runs).
     */
    runWith<T>(p: Permit, fn: () => T | Promise<T>, opts?: GuardOptions): Promise<T>;
    /**
     * excludes reports whether err is not the dependency's fault: exclude
     * (one call's) or the client's exclude option says so. Such an error is
     * recorded as never counted.
     */
    excludes(err: unknown, exclude?: (err: unknown) => boolean): boolean;
    /** settle records a guarded call's evidence (or outcome); a failure to record never replaces the call's own result. */
    private settle;
    /** get returns one breaker's state. Throws UnreachableError when no daemon answers: it has no fallback. */
    get(breaker: string, opts?: CallOptions): Promise<BreakerState>;
    /** getPolicy returns the policy in effect for breaker. Throws UnreachableError when no daemon answers. */
    getPolicy(breaker: string, opts?: CallOptions): Promise<Policy>;
    /**
     * states returns the named breakers' states in one BatchGet within the
     * Allow budget (with this worker's id, so a suspect worker sees its own
     * denial), or undefined when no daemon answered.
     */
    states(breakers: readonly string[], opts?: CallOptions): Promise<BreakerState[] | undefined>;
    /** fallbackState is the fallback's verdict on a breaker, as a permit that takes no probe slot. */
    fallbackVerdict(breaker: string, tool: string): Permit | undefined;
}
/** denialError is the CircuitOpenError for a denied permit. */
export declare function denialError(p: Permit): CircuitOpenError;
