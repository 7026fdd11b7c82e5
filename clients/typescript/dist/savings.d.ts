/** How often a client reports, ms (the Go client's DefaultSavingsInterval). */
export declare const DEFAULT_SAVINGS_INTERVAL_MS = 10000;
/** The most reports one ReportSavings call may carry (breakerd's bound). */
export declare const MAX_SAVINGS_BATCH = 1024;
/** The largest count one report may carry (breakerd's bound); a larger tally goes out over several reports. */
export declare const MAX_SAVINGS_COUNT = 1000000;
/** The most breakers the unsent counts cover (while no daemon answers); counts for further breakers are not kept. */
export declare const MAX_SAVINGS_HELD = 10000;
/** SavingsReport is one breaker's counts in a ReportSavings call (int64s as strings, as the proto3 JSON mapping writes them). */
export interface SavingsReport {
    breaker: string;
    local_denials: string;
    tools_removed: string;
}
/** Counts are what one breaker saved and is not reported yet. */
export interface SavingsCounts {
    localDenials: number;
    toolsRemoved: number;
}
/** Savings holds what one worker saved since its last report, by breaker, and sends it with send (one call per batch). */
export declare class Savings {
    private readonly send;
    /** ms between reports; 0 or less: counting is off. */
    private readonly intervalMs;
    private readonly onError?;
    private readonly held;
    private timer;
    private flushing;
    /** The calls refused in this process that breakerd took. */
    denialsReported: number;
    /** The tools runs left out that breakerd took. */
    removedReported: number;
    constructor(send: (reports: SavingsReport[]) => Promise<unknown>, 
    /** ms between reports; 0 or less: counting is off. */
    intervalMs: number, onError?: ((err: unknown) => void) | undefined);
    /** enabled: the client counts and reports. */
    get enabled(): boolean;
    /** start begins the periodic report (a timer that keeps no process alive). */
    start(): void;
    /** add counts what was saved on breaker. */
    add(breaker: string, localDenials: number, toolsRemoved: number): void;
    /** pending is what is not reported yet, by breaker. */
    pending(): Map<string, SavingsCounts>;
    /** take removes and returns the next batch: at most MAX_SAVINGS_BATCH breakers, each count at most MAX_SAVINGS_COUNT. */
    private take;
    /**
     * flush sends everything held now. Resolves true when nothing is left,
     * false when no daemon answered (the batch is kept for the next report).
     * A batch breakerd refuses is dropped, and its error thrown once the
     * rest is sent.
     */
    flush(): Promise<boolean>;
    private sendAll;
    /** close stops the timer and sends what is left (best effort: what no daemon takes is lost; failures go to onError). */
    close(): Promise<void>;
}
