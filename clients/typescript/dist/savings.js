// What the client saved: the calls it refused in its own process and the
// tools its runs left out, counted here and reported to breakerd in
// batches (ReportSavings), which counts them with its own denials
// (docs/operations.md, "What the breakers saved"). Counting is a map
// update: it never waits on the network. A timer sends the counts every
// interval and close() sends what is left; what no daemon could be
// reached for stays for the next report, what a daemon refuses is dropped.
import { UnreachableError } from "./errors.js";
/** How often a client reports, ms (the Go client's DefaultSavingsInterval). */
export const DEFAULT_SAVINGS_INTERVAL_MS = 10_000;
/** The most reports one ReportSavings call may carry (breakerd's bound). */
export const MAX_SAVINGS_BATCH = 1024;
/** The largest count one report may carry (breakerd's bound); a larger tally goes out over several reports. */
export const MAX_SAVINGS_COUNT = 1_000_000;
/** The most breakers the unsent counts cover (while no daemon answers); counts for further breakers are not kept. */
export const MAX_SAVINGS_HELD = 10_000;
/** Savings holds what one worker saved since its last report, by breaker, and sends it with send (one call per batch). */
export class Savings {
    send;
    intervalMs;
    onError;
    held = new Map();
    timer;
    flushing;
    /** The calls refused in this process that breakerd took. */
    denialsReported = 0;
    /** The tools runs left out that breakerd took. */
    removedReported = 0;
    constructor(send, 
    /** ms between reports; 0 or less: counting is off. */
    intervalMs, onError) {
        this.send = send;
        this.intervalMs = intervalMs;
        this.onError = onError;
    }
    /** enabled: the client counts and reports. */
    get enabled() {
        return this.intervalMs > 0;
    }
    /** start begins the periodic report (a timer that keeps no process alive). */
    start() {
        if (!this.enabled || this.timer)
            return;
        this.timer = setInterval(() => {
            if (!this.flushing)
                this.flush().catch((err) => this.onError?.(err));
        }, this.intervalMs);
        this.timer.unref?.();
    }
    /** add counts what was saved on breaker. */
    add(breaker, localDenials, toolsRemoved) {
        if (!this.enabled)
            return;
        let c = this.held.get(breaker);
        if (!c) {
            if (this.held.size >= MAX_SAVINGS_HELD)
                return;
            c = { localDenials: 0, toolsRemoved: 0 };
            this.held.set(breaker, c);
        }
        c.localDenials += localDenials;
        c.toolsRemoved += toolsRemoved;
    }
    /** pending is what is not reported yet, by breaker. */
    pending() {
        return new Map([...this.held].map(([b, c]) => [b, { ...c }]));
    }
    /** take removes and returns the next batch: at most MAX_SAVINGS_BATCH breakers, each count at most MAX_SAVINGS_COUNT. */
    take() {
        const batch = [];
        for (const [b, c] of this.held) {
            if (batch.length === MAX_SAVINGS_BATCH)
                break;
            const d = Math.min(c.localDenials, MAX_SAVINGS_COUNT);
            const r = Math.min(c.toolsRemoved, MAX_SAVINGS_COUNT);
            c.localDenials -= d;
            c.toolsRemoved -= r;
            if (c.localDenials === 0 && c.toolsRemoved === 0)
                this.held.delete(b);
            batch.push({ breaker: b, local_denials: String(d), tools_removed: String(r) });
        }
        return batch;
    }
    /**
     * flush sends everything held now. Resolves true when nothing is left,
     * false when no daemon answered (the batch is kept for the next report).
     * A batch breakerd refuses is dropped, and its error thrown once the
     * rest is sent.
     */
    flush() {
        const p = this.sendAll().finally(() => {
            if (this.flushing === p)
                this.flushing = undefined;
        });
        this.flushing = p;
        return p;
    }
    async sendAll() {
        let refused;
        for (let batch = this.take(); batch.length > 0; batch = this.take()) {
            try {
                await this.send(batch);
            }
            catch (err) {
                if (err instanceof UnreachableError) {
                    for (const r of batch)
                        this.add(r.breaker, Number(r.local_denials), Number(r.tools_removed));
                    return false;
                }
                refused = err;
                continue;
            }
            for (const r of batch) {
                this.denialsReported += Number(r.local_denials);
                this.removedReported += Number(r.tools_removed);
            }
        }
        if (refused !== undefined)
            throw refused;
        return true;
    }
    /** close stops the timer and sends what is left (best effort: what no daemon takes is lost; failures go to onError). */
    async close() {
        if (this.timer)
            clearInterval(this.timer);
        this.timer = undefined;
        await this.flushing?.catch(() => undefined);
        await this.flush().catch((err) => this.onError?.(err));
    }
}
