import { type BreakerState, type Ticket } from "./wire.js";
/** MAX_FAST_BREAKERS bounds the breakers the view holds; past it a breaker is asked as in strict mode. */
export declare const MAX_FAST_BREAKERS = 4096;
/**
 * plainSuccess says evidence is a success by its face, with nothing for
 * breakerd to read: no evidence at all, or a 2xx status alone. Anything
 * else (an error kind, a gRPC status, wait headers) is breakerd's to
 * classify, so it is sent.
 */
export declare function plainSuccess(ev: Record<string, unknown>): boolean;
/** FastView is the fast-mode view. */
export declare class FastView {
    private readonly only?;
    private readonly entries;
    private readonly used;
    /** Allows answered here, successes not sent (for tests and the bench). */
    readonly stats: {
        allowed: number;
        skipped: number;
    };
    /** only: the breakers the watch stream follows (ClientOptions.watch's list); none: every breaker. */
    constructor(only?: readonly string[] | undefined);
    /** use marks breaker as one this client asks about: the view keeps what it learns of it (a breaker the stream does not follow, never). */
    use(breaker: string): void;
    /** learn takes a state breakerd returned or the stream carried, unless the view holds a later one. */
    learn(st: BreakerState | undefined): void;
    /**
     * event takes one watch event: a run notice moves the run flag (true:
     * handled here); any other event without a state forgets the breaker
     * (the open cache reads it afresh, and that answer teaches the view).
     */
    event(ev: Record<string, unknown>): boolean;
    /** allow is the ticket of an Allow answered here, or undefined: breakerd is asked. */
    allow(breaker: string, live: boolean): {
        ticket: Ticket;
        state: BreakerState;
    } | undefined;
    /**
     * skip says a success under ticket need not be sent: the breaker is
     * closed with no run, counts no window, the call was not slow, and the
     * stream is live. A success under a ticket older than the view's
     * generation is skipped too (breakerd would not count it).
     */
    skip(breaker: string, ticket: Ticket, latencyMs: number | undefined, live: boolean): boolean;
    /** failed marks a run started by this worker's own failure at once, before any notice comes back. */
    failed(breaker: string, ticket: Ticket): void;
}
