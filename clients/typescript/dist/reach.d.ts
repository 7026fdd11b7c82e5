import { UnreachableError } from "./errors.js";
/** REPROBE_MS is how often a client no daemon answers asks again. */
export declare const REPROBE_MS = 1000;
export interface ReachOptions {
    /** The daemon URLs, for the message. */
    urls: string;
    /** One cheap call: resolves true when a daemon answered. */
    probe: () => Promise<boolean>;
    /** Told once per loss. */
    onError: (err: unknown) => void;
    reprobeMs?: number | undefined;
}
/** Reach is the client's verdict on its daemons. */
export declare class Reach {
    private readonly o;
    private isDown;
    private timer;
    private closed;
    /** Times every daemon went quiet (for tests). */
    losses: number;
    constructor(o: ReachOptions);
    /** down is true while no daemon answers: calls do not wait. */
    get down(): boolean;
    /** failed takes a call no daemon answered within the RPC timeout: the first makes the client down and says so. */
    failed(why: UnreachableError): void;
    /** answered takes any daemon's answer: the client is up again. */
    answered(): void;
    close(): void;
    private schedule;
}
