import { type StoredDenial } from "./denial.js";
import { type Transport } from "./transport.js";
import { type BreakerState } from "./wire.js";
/** DEFAULT_HEARTBEAT_MS is the interval assumed of a daemon that announces none (the daemon's default). */
export declare const DEFAULT_HEARTBEAT_MS = 15000;
/** STALE_VIEW_MS bounds how long a denial learned before the stream went quiet is answered while it stays quiet. */
export declare const STALE_VIEW_MS = 60000;
/** CachedDenial is what the cache knows of one denying breaker. */
export interface CachedDenial {
    breaker: string;
    /** The daemon's denial for this worker, on this process's clock (denial.untilMs: until when it holds). */
    denial: StoredDenial;
    alternatives: string[];
    /** The parent scope's name when the parent denies; "". */
    parent: string;
    /** When the cache learned it, on this process's clock. */
    learnedMs: number;
}
export interface OpenCacheOptions {
    transport: Transport;
    /** The worker whose view a refresh reads (BatchGet's worker_id). */
    workerId: string;
    clock: () => number;
    /** Only these breakers' events; every breaker's when empty. */
    breakers?: readonly string[] | undefined;
    /** How long to wait before reconnecting a dropped stream, ms (doubles to 5 s). Default 100. */
    retryMs?: number | undefined;
    /** Told of each stream failure (for logs); the stream reconnects regardless. */
    onError?: ((err: unknown) => void) | undefined;
    /** The heartbeat interval assumed until a snapshot announces one, ms (tests shorten it). Default DEFAULT_HEARTBEAT_MS. */
    heartbeatMs?: number | undefined;
    /** Also stream run notices (fast mode's view needs them). */
    runNotices?: boolean | undefined;
    /** Told of every state learned (fast mode's view). */
    onState?: ((st: BreakerState) => void) | undefined;
    /** Told of every event first; true: taken, the cache does nothing more with it (fast mode's run notices). */
    onEvent?: ((ev: Record<string, unknown>) => boolean) | undefined;
}
/** OpenCache keeps the denying breakers. */
export declare class OpenCache {
    private readonly o;
    private readonly deny;
    /** The last stream id seen per breaker: events are delivered at least once, duplicates dropped. */
    private readonly seen;
    private lastEventId;
    private abort;
    private connected;
    private snapshots;
    private loop;
    /** Breakers an event named without saying until when they deny: read afresh in one BatchGet. */
    private readonly stale;
    private refreshing;
    /** The parts of a snapshot read so far (a snapshot may come in several). */
    private parts;
    /** The interval the daemon announced (or the default): a stream silent for 3 of them is dropped. */
    private heartbeatMs;
    /** When the stream was last heard while live; 0 before. */
    private heardMs;
    /** Streams dropped for their silence (for tests and logs). */
    stalls: number;
    constructor(o: OpenCacheOptions);
    /**
     * lookup returns the breaker's denial while it lasts. While the stream
     * is not live (it was asked for and is dropped or stalled), a denial
     * learned more than STALE_VIEW_MS ago is not answered: the view is no
     * longer heard (a force lifted meanwhile must not deny for ever).
     */
    lookup(breaker: string): CachedDenial | undefined;
    /** degraded says the stream was asked for and is not live: the view is what was last heard. */
    get degraded(): boolean;
    /**
     * learn takes a state breakerd returned (Allow, Get, BatchGet, a
     * snapshot or an event): the denial it holds for this worker, or none.
     */
    learn(st: BreakerState | undefined): void;
    /** size is how many breakers the cache holds as denying (expired ones included until looked up). */
    get size(): number;
    /** status says whether the stream is live and how many snapshots it has read. */
    get status(): {
        connected: boolean;
        snapshots: number;
        lastEventId: string;
    };
    /** start opens the event stream (reconnecting until stop). */
    start(): void;
    /** stop closes the stream and waits for its loop to end. */
    stop(): Promise<void>;
    private run;
    /** stream reads one connection to its end; true when it got at least one event. */
    private stream;
    /** take applies one stream event. */
    private take;
    /** refresh reads the named breakers' states afresh (one BatchGet for every name gathered meanwhile). */
    private refresh;
    /** settled resolves once the reads afresh that events asked for are done (for tests). */
    settled(): Promise<void>;
    /**
     * snapshotPart takes one part of the opening snapshot: its states are
     * gathered until the part without `more: true`, which replaces the view
     * and makes the stream live. A part may announce the heartbeat interval
     * (`heartbeat_ms`, a number or an int64 string).
     */
    private snapshotPart;
}
