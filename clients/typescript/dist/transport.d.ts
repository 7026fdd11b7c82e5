import { type Stop, type Unary } from "./unary.js";
/** The service path prefix of every unary method. */
export declare const SERVICE_PATH = "/breakerd.v1.BreakerService/";
/** MAX_BODY_BYTES bounds one answer's body: breakerd's largest (a BatchGet of 1,024 states) is well within it. */
export declare const MAX_BODY_BYTES: number;
/** parseURLs checks the daemon URLs once: each must be an http(s) URL. */
export declare function parseURLs(urls: string | readonly string[]): URL[];
export interface TransportOptions {
    urls: URL[];
    token?: string | undefined;
    fetch: typeof fetch;
    /** The unary calls' sender, when there is one beside fetch (keepalive.ts on Node); absent: fetch sends them. */
    unary?: Unary | undefined;
    /** A call outstanding this long at a daemon passes it over for the others, ms (the Allow budget); absent: never. */
    skipAfterMs?: number | undefined;
    /** The clock of the back-off of a daemon that did not answer, ms. Default Date.now. */
    clock?: (() => number) | undefined;
    /** The call that probes such a daemon. Default BatchGet of no breaker. */
    probe?: {
        method: string;
        body: unknown;
    } | undefined;
    /** How long a probe may take, ms. Default 2000. */
    probeTimeoutMs?: number | undefined;
}
/** CallOptions bound one call: its budget, and the caller's own signal. */
export interface CallOptions {
    /** How long every attempt together may take, ms; 0 or absent: no bound but the signal. */
    budgetMs?: number | undefined;
    signal?: AbortSignal | undefined;
}
/** Transport sends unary calls with failover. Safe for concurrent use. */
export declare class Transport {
    private readonly o;
    private next;
    private readonly busy;
    private readonly strikes;
    private readonly due;
    private readonly probing;
    /** Background probes sent (for tests). */
    probes: number;
    /** Each daemon's method URLs, by "<daemon> <method>". */
    private readonly targets;
    constructor(o: TransportOptions);
    /** probesOut says whether a background probe is out (for tests). */
    get probesOut(): boolean;
    /** The daemon URLs, in the order configured. */
    get urls(): readonly URL[];
    /** headers are the request headers every call (and the watch stream) sends. */
    headers(extra?: Record<string, string>): Record<string, string>;
    /** fetch is the platform fetch this transport uses. */
    get fetch(): typeof fetch;
    /**
     * call posts body to method on one daemon after another (starting with
     * the last that answered) until one answers or the budget is spent.
     * Throws UnreachableError when none answered, the caller's abort reason
     * when its signal ended the call, and APIError/AuthError/ProtocolError
     * for an answer that refuses the request.
     */
    call<T>(method: string, body: unknown, co?: CallOptions): Promise<T>;
    /** target is method's URL at daemon idx (made once). */
    private target;
    /**
     * order is the daemons to try, from first on, and how many of them are
     * free: those passed over (a call outstanding past skipAfterMs, or one
     * that did not answer and has not answered a probe since) come last.
     * While another daemon is free, a daemon that did not answer is probed
     * in the background once its back-off is over.
     */
    private order;
    /** strike takes a call daemon idx did not answer. */
    private strike;
    /** probe asks daemon idx in the background: an answer within skipAfterMs (a refusal too: the daemon is there) takes it back. */
    private probe;
    /** attempt sends one request to one daemon: the parsed answer, a typed error thrown, or Unreached. */
    private attempt;
    /** sendUnary sends through the unary sender: its whole answer, or Unreached. */
    private sendUnary;
    /** sendFetch sends through fetch: its answer with the body read, or Unreached. */
    private sendFetch;
}
/** causeText is one failure's words, with its own cause's (fetch's "fetch failed" hides ECONNREFUSED there). */
export declare function causeText(err: unknown): string;
/** TooLarge is a body over its bound. */
export declare class TooLarge extends Error {
    constructor(limit: number);
}
/**
 * readBounded reads a response's body as text, at most limit bytes: a
 * longer one is cancelled and TooLarge thrown, so a hostile or broken
 * server cannot grow the process. The call's signal bounds the time.
 */
export declare function readBounded(res: Response, limit: number): Promise<string>;
/** A Bound is a signal made for one call; release drops its timer or listeners once the call is over. */
export interface Bound {
    signal: Stop;
    release(): void;
}
/**
 * timeout is a signal that ends after ms with a TimeoutError, as
 * AbortSignal.timeout's does, but whose timer release clears: a call
 * answered in time leaves no timer behind it, and the timer never keeps
 * the process alive.
 */
export declare function timeout(ms: number): Bound;
/**
 * anySignal is a signal that aborts when any of the given ones does
 * (AbortSignal.any is Node ≥ 20.3); release takes its listeners off the
 * given signals, so a caller's long-lived signal does not gather one per
 * call. Undefined when none is given.
 */
export declare function anySignal(signals: (Stop | undefined)[]): Bound | undefined;
