import { UnreachableError } from "./errors.js";
/** The back-off of a daemon (or of every daemon) that did not answer, ms: the Go client's (pkg/client/pick.go, hungBackoff). */
export declare const BACKOFF_MS = 1000;
export declare const BACKOFF_MAX_MS = 30000;
/** backoffMs is how long to wait after strikes failures in a row (1 s, doubling to 30 s). */
export declare function backoffMs(strikes: number): number;
export interface ReachOptions {
    /** The daemon URLs, for the message. */
    urls: string;
    /** One cheap call: resolves true when a daemon answered. */
    probe: () => Promise<boolean>;
    /** Told once per loss, and once per return (ReachableAgain). */
    onError: (err: unknown) => void;
    /** The client's clock, ms: times the back-off. */
    clock: () => number;
}
/** Reach is the client's verdict on its daemons. */
export declare class Reach {
    private readonly o;
    private isDown;
    private timer;
    private closed;
    private strikes;
    private dueMs;
    /** A re-probe is out. */
    probing: boolean;
    /** Times every daemon went quiet (for tests). */
    losses: number;
    /** Re-probes started (for tests). */
    probes: number;
    constructor(o: ReachOptions);
    /** down is true while no daemon answers: calls do not wait. */
    get down(): boolean;
    /** failed takes a call no daemon answered within the RPC timeout: the first makes the client down and says so. */
    failed(why: UnreachableError): void;
    /** answered takes any daemon's answer: the client is up again, said once. */
    answered(): void;
    /** poll starts a re-probe when one is due (the timer polls; so does each call while down). */
    poll(): void;
    close(): void;
    private settle;
}
