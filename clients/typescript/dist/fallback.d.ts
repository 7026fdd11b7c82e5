import { type Evidence, type Policy } from "./wire.js";
/** LocalPolicy is the fallback's policy of a breaker: breakerd's, from the client's first Allow of it (localPolicy). */
export interface LocalPolicy {
    /** Consecutive counted failures that open the local circuit. */
    threshold: number;
    /** The first open period, ms. */
    cooldownBaseMs: number;
    /** The longest open period, ms. */
    cooldownCapMs: number;
    /** How long a probe that never reports holds the one probe slot, ms. */
    probeTimeoutMs: number;
}
/** DEFAULT_LOCAL_POLICY is breakerd's default policy's values of these fields (conformance/client_rules.json's defaults). */
export declare const DEFAULT_LOCAL_POLICY: LocalPolicy;
/** localPolicy is the fallback's part of a breaker's effective policy; a field breakerd left out keeps its default. */
export declare function localPolicy(p: Policy): LocalPolicy;
/** LocalVerdict is the fallback's answer to one Allow. */
export type LocalVerdict = {
    allowed: true;
    probe: boolean;
} | {
    allowed: false;
    probeInFlight: boolean;
    retryAfterMs: number;
};
/** What the fallback does with one outcome: count a failure, end a failure run, or nothing. */
export type LocalEffect = "count" | "success" | "none";
/** effectOfOutcome is what the fallback does with an outcome (an Outcome enum name): outside the subset, nothing. */
export declare function effectOfOutcome(outcome: string): LocalEffect;
/**
 * localEffect is what the fallback does with a call's evidence, which no
 * daemon classified, for a caller with deadlineMs left: a transport error
 * kind, a timeout, malformed output, a 5xx or a 408 counts, and so does a
 * 429 that names no wait when the caller has a deadline the bare wait
 * passes; a call that raised nothing and got no status of 400 or more
 * ends a failure run; anything else (another 4xx, a rate limit naming its
 * wait, a cancel, a breakerd denial, an error no one can name) does
 * nothing. The tests hold it to conformance/client_rules.json's
 * fallback_counts rows and to every row of
 * conformance/classification.json whose outcome is in the subset.
 */
export declare function localEffect(ev: Evidence, deadlineMs?: number): LocalEffect;
/** LocalBreaker is the fallback over the breakers this worker calls. */
export declare class LocalBreaker {
    private readonly clock;
    private readonly policyOf;
    private readonly table;
    constructor(clock: () => number, policyOf: (breaker: string) => LocalPolicy);
    /** allow decides one call; a probe it grants holds the slot until recorded or timed out. */
    allow(breaker: string): LocalVerdict;
    /** peek is the denial allow would give, without taking the probe slot; undefined when allow would let a call go. */
    peek(breaker: string): Extract<LocalVerdict, {
        allowed: false;
    }> | undefined;
    /** record applies one call's effect; probe says the call was the local probe. */
    record(breaker: string, effect: LocalEffect, probe: boolean): void;
    /**
     * holdOpen makes a closed breaker open with its probe due now (one call
     * goes, the rest are denied until its outcome): the daemons last said
     * it was open and none answers now.
     */
    holdOpen(breaker: string): void;
    /** reset forgets every local verdict: breakerd answers again. */
    reset(): void;
}
