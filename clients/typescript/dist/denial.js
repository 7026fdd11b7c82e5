// The denials this client keeps: the daemon's, as it decided and worded
// them (AllowResponse.denial, BreakerState.denial, or
// BreakerState.suspect_denial for the suspect worker it names), moved
// onto this process's clock; and the local fallback's own, whose words
// are conformance/fallback_denials.json's. No state is read into a
// decision here, and no sentence is made: render.ts fills the shared
// templates with them.
import { FALLBACK_DENIALS } from "./templates.js";
import { int64 } from "./wire.js";
/** The largest int64: a deny_until_ms "until an operator acts". */
const FOREVER = "9223372036854775807";
const SCOPES = {
    DENIAL_SCOPE_BREAKER: "breaker",
    DENIAL_SCOPE_PARENT: "parent",
    DENIAL_SCOPE_WORKER: "worker",
};
/** local moves a time of breakerd's clock onto this process's: breakerd's clock read asOf when ours read now. */
function local(t, asOf, now) {
    if (t <= 0)
        return 0;
    return asOf > 0 ? now + (t - asOf) : t;
}
/**
 * storeDenial keeps the daemon's denial d, whose times are on breakerd's
 * clock as it read asOfMs while this process's read nowMs; undefined when
 * there is none.
 */
export function storeDenial(d, asOfMs, nowMs) {
    if (!d || !d.decision || d.decision === "DECISION_UNSPECIFIED")
        return undefined;
    const until = d.deny_until_ms === FOREVER ? Infinity : local(int64(d.deny_until_ms), asOfMs, nowMs);
    return {
        decision: d.decision,
        status: d.status ?? "",
        reason: d.reason ?? "",
        scope: SCOPES[d.scope ?? ""] ?? "breaker",
        forced: d.forced ?? false,
        untilMs: until,
        mayReturnAtMs: local(int64(d.may_return_at_ms), asOfMs, nowMs),
    };
}
/**
 * wireDenialOf is the denial a state holds for workerId: its suspect
 * denial when workerId is the suspect worker it names (a state sent to
 * many), else its denial (the asking worker's, or the fleet's).
 */
export function wireDenialOf(st, workerId) {
    if (st.suspect_worker && st.suspect_worker === workerId && st.suspect_denial)
        return st.suspect_denial;
    return st.denial ?? undefined;
}
/** denialOfState is the denial state st holds for workerId, on this process's clock (nowMs); undefined when none. */
export function denialOfState(st, workerId, nowMs, asOfMs = int64(st.as_of_ms)) {
    return storeDenial(wireDenialOf(st, workerId), asOfMs, nowMs);
}
/**
 * fallbackDenial is the local fallback's denial of kind, holding for
 * waitMs from nowMs (conformance/fallback_denials.json's words; the only
 * denials this client makes). A probe in flight, or no wait, gives no
 * return time.
 */
export function fallbackDenial(kind, waitMs, nowMs) {
    const probing = kind === "probe_in_flight";
    const w = FALLBACK_DENIALS[kind];
    return {
        decision: probing ? "DECISION_DENIED_PROBE_IN_FLIGHT" : "DECISION_DENIED_OPEN",
        status: w.status,
        reason: w.reason,
        scope: "breaker",
        forced: false,
        untilMs: nowMs + Math.max(0, waitMs),
        mayReturnAtMs: probing || waitMs <= 0 ? 0 : nowMs + waitMs,
    };
}
/** retryAfterOf is how long until asking again may help, ms, at nowMs: 0 when unknown. */
export function retryAfterOf(d, nowMs) {
    return d.mayReturnAtMs > 0 ? Math.max(0, d.mayReturnAtMs - nowMs) : 0;
}
