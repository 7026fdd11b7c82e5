// The minimal local fallback: what a worker does while no daemon answers
// within the Allow budget, for the breakers the open cache knows nothing
// of. It is the subset of the Go client's local breaker that
// conformance/fallback.json holds every client to: one worker (no
// quorum); consecutive counted failures up to the policy's threshold open
// the local circuit for the base cooldown; after it one local probe goes
// while every other call is denied; the probe's success closes the
// circuit, its failure opens it again for twice the previous cooldown, at
// most the cap. No rate-limit rule, no pause.
/** DEFAULT_LOCAL_POLICY is breakerd's default policy's values of these fields (docs/policies.md). */
export const DEFAULT_LOCAL_POLICY = {
    threshold: 5,
    cooldownBaseMs: 30_000,
    cooldownCapMs: 900_000,
    probeTimeoutMs: 30_000,
};
/** The outcomes of the subset, by what the fallback does with them. */
const OUTCOME_EFFECTS = {
    OUTCOME_SUCCESS: "success",
    OUTCOME_TRANSPORT: "count",
    OUTCOME_TIMEOUT: "count",
    OUTCOME_SERVER_ERROR: "count",
    OUTCOME_MALFORMED_OUTPUT: "count",
};
/** effectOfOutcome is what the fallback does with an outcome (an Outcome enum name): outside the subset, nothing. */
export function effectOfOutcome(outcome) {
    return OUTCOME_EFFECTS[outcome] ?? "none";
}
/**
 * localEffect is what the fallback does with a call's evidence, which no
 * daemon classified: every error kind but a cancel or a breakerd denial
 * counts, so does a 5xx or a 408; a call that raised nothing and got no
 * status of 400 or more ends a failure run; anything else (a 4xx, a rate
 * limit, a cancel) does nothing. The test holds it to the rows of
 * conformance/classification.json whose outcome is in the subset.
 */
export function localEffect(ev) {
    const k = ev.error_kind;
    if (k === "ERROR_KIND_CANCELLED" || k === "ERROR_KIND_BREAKERD_DENIAL")
        return "none";
    if (k)
        return "count";
    const s = ev.http_status ?? 0;
    if (s >= 500 || s === 408)
        return "count";
    if (s >= 400)
        return "none";
    return "success";
}
const SUFFIX = " (local breaker: breakerd unreachable)";
/** LocalBreaker is the fallback over the breakers this worker calls. */
export class LocalBreaker {
    clock;
    policyOf;
    table = new Map();
    constructor(clock, policyOf) {
        this.clock = clock;
        this.policyOf = policyOf;
    }
    /** allow decides one call; a probe it grants holds the slot until recorded or timed out. */
    allow(breaker) {
        const v = this.peek(breaker);
        if (v)
            return v;
        const b = this.table.get(breaker);
        if (!b || b.openUntil === 0)
            return { allowed: true, probe: false };
        b.probeUntil = this.clock() + this.policyOf(breaker).probeTimeoutMs;
        return { allowed: true, probe: true };
    }
    /** peek is the denial allow would give, without taking the probe slot; undefined when allow would let a call go. */
    peek(breaker) {
        const b = this.table.get(breaker);
        const now = this.clock();
        if (!b || b.openUntil === 0)
            return undefined;
        if (now < b.openUntil) {
            const reason = `${breaker} failing: ${b.failures} consecutive failures, last: ${b.last}${SUFFIX}`;
            return { allowed: false, probeInFlight: false, retryAfterMs: b.openUntil - now, reason };
        }
        if (now < b.probeUntil) {
            const reason = `${breaker} is being probed after an outage${SUFFIX}`;
            return { allowed: false, probeInFlight: true, retryAfterMs: b.probeUntil - now, reason };
        }
        return undefined;
    }
    /** record applies one call's effect; probe says the call was the local probe. */
    record(breaker, effect, probe, last = "") {
        const b = this.table.get(breaker);
        if (effect === "none") {
            if (probe && b)
                b.probeUntil = 0; // a cancelled probe frees the slot
            return;
        }
        if (effect === "success") {
            if (b && (probe || b.openUntil === 0))
                this.table.delete(breaker);
            return;
        }
        const p = this.policyOf(breaker);
        const now = this.clock();
        const s = b ?? { failures: 0, cooldownMs: 0, openUntil: 0, probeUntil: 0, last: "" };
        this.table.set(breaker, s);
        s.failures++;
        s.last = last || "a failure";
        if (probe && s.openUntil > 0) {
            s.cooldownMs = Math.min(2 * s.cooldownMs, p.cooldownCapMs);
            s.openUntil = now + s.cooldownMs;
            s.probeUntil = 0;
        }
        else if (s.openUntil === 0 && s.failures >= p.threshold) {
            s.cooldownMs = Math.min(p.cooldownBaseMs, p.cooldownCapMs);
            s.openUntil = now + s.cooldownMs;
        }
    }
    /**
     * holdOpen makes a closed breaker open with its probe due now (one call
     * goes, the rest are denied until its outcome): the daemons last said
     * it was open and none answers now.
     */
    holdOpen(breaker) {
        if ((this.table.get(breaker)?.openUntil ?? 0) !== 0)
            return;
        const now = this.clock();
        const base = this.policyOf(breaker).cooldownBaseMs;
        this.table.set(breaker, { failures: 0, cooldownMs: base, openUntil: now, probeUntil: 0, last: "open when breakerd last answered" });
    }
    /** reset forgets every local verdict: breakerd answers again. */
    reset() {
        if (this.table.size > 0)
            this.table.clear();
    }
}
/** describe says what a failure was, in a few words, for the fallback's reason. */
export function describe(ev) {
    if (ev.error_kind)
        return ev.error_kind.replace("ERROR_KIND_", "").toLowerCase().replace(/_/g, " ");
    return `HTTP ${ev.http_status ?? 0}`;
}
