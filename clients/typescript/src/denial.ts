// The denials this client keeps: the daemon's, as it decided and worded
// them (AllowResponse.denial, BreakerState.denial, or
// BreakerState.suspect_denial for the suspect worker it names), moved
// onto this process's clock; and the local fallback's own, whose words
// are conformance/fallback_denials.json's. No state is read into a
// decision here, and no sentence is made: render.ts fills the shared
// templates with them.

import { FALLBACK_DENIALS } from "./templates.js";
import { int64, type BreakerState, type Decision, type WireDenial } from "./wire.js";

/** The largest int64: a deny_until_ms "until an operator acts". */
const FOREVER = "9223372036854775807";

/** DenialScopeWord is what a denial puts out of service, as the templates name it. */
export type DenialScopeWord = "breaker" | "parent" | "worker";

/** StoredDenial is one denial as the client keeps it, on this process's clock. */
export interface StoredDenial {
  /** A DENIED_* decision. */
  decision: Decision;
  /** The tool result's status word (conformance/README.md: circuit_open, probe_in_flight, forced_open, ...). */
  status: string;
  /** Why, in the daemon's words for a model. */
  reason: string;
  scope: DenialScopeWord;
  /** An operator forced it. */
  forced: boolean;
  /** Until when it holds by itself, ms since the epoch; Infinity: until an operator acts. */
  untilMs: number;
  /** When the tool may be back, ms since the epoch; 0 when unknown or while a probe is in flight. */
  mayReturnAtMs: number;
}

const SCOPES: Readonly<Record<string, DenialScopeWord>> = {
  DENIAL_SCOPE_BREAKER: "breaker",
  DENIAL_SCOPE_PARENT: "parent",
  DENIAL_SCOPE_WORKER: "worker",
};

/** local moves a time of breakerd's clock onto this process's: breakerd's clock read asOf when ours read now. */
function local(t: number, asOf: number, now: number): number {
  if (t <= 0) return 0;
  return asOf > 0 ? now + (t - asOf) : t;
}

/**
 * storeDenial keeps the daemon's denial d, whose times are on breakerd's
 * clock as it read asOfMs while this process's read nowMs; undefined when
 * there is none.
 */
export function storeDenial(d: WireDenial | null | undefined, asOfMs: number, nowMs: number): StoredDenial | undefined {
  if (!d || !d.decision || d.decision === "DECISION_UNSPECIFIED") return undefined;
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
export function wireDenialOf(st: BreakerState, workerId: string): WireDenial | undefined {
  if (st.suspect_worker && st.suspect_worker === workerId && st.suspect_denial) return st.suspect_denial;
  return st.denial ?? undefined;
}

/** denialOfState is the denial state st holds for workerId, on this process's clock (nowMs); undefined when none. */
export function denialOfState(st: BreakerState, workerId: string, nowMs: number, asOfMs = int64(st.as_of_ms)): StoredDenial | undefined {
  return storeDenial(wireDenialOf(st, workerId), asOfMs, nowMs);
}

/** FallbackKind is which of the local fallback's own denials: its circuit is open, or its one probe is out. */
export type FallbackKind = keyof typeof FALLBACK_DENIALS;

/**
 * fallbackDenial is the local fallback's denial of kind, holding for
 * waitMs from nowMs (conformance/fallback_denials.json's words; the only
 * denials this client makes). A probe in flight, or no wait, gives no
 * return time.
 */
export function fallbackDenial(kind: FallbackKind, waitMs: number, nowMs: number): StoredDenial {
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
export function retryAfterOf(d: StoredDenial, nowMs: number): number {
  return d.mayReturnAtMs > 0 ? Math.max(0, d.mayReturnAtMs - nowMs) : 0;
}
