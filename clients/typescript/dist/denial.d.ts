import { FALLBACK_DENIALS } from "./templates.js";
import { type BreakerState, type Decision, type WireDenial } from "./wire.js";
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
/**
 * storeDenial keeps the daemon's denial d, whose times are on breakerd's
 * clock as it read asOfMs while this process's read nowMs; undefined when
 * there is none.
 */
export declare function storeDenial(d: WireDenial | null | undefined, asOfMs: number, nowMs: number): StoredDenial | undefined;
/**
 * wireDenialOf is the denial a state holds for workerId: its suspect
 * denial when workerId is the suspect worker it names (a state sent to
 * many), else its denial (the asking worker's, or the fleet's).
 */
export declare function wireDenialOf(st: BreakerState, workerId: string): WireDenial | undefined;
/** denialOfState is the denial state st holds for workerId, on this process's clock (nowMs); undefined when none. */
export declare function denialOfState(st: BreakerState, workerId: string, nowMs: number, asOfMs?: number): StoredDenial | undefined;
/** FallbackKind is which of the local fallback's own denials: its circuit is open, or its one probe is out. */
export type FallbackKind = keyof typeof FALLBACK_DENIALS;
/**
 * fallbackDenial is the local fallback's denial of kind, holding for
 * waitMs from nowMs (conformance/fallback_denials.json's words; the only
 * denials this client makes). A probe in flight, or no wait, gives no
 * return time.
 */
export declare function fallbackDenial(kind: FallbackKind, waitMs: number, nowMs: number): StoredDenial;
/** retryAfterOf is how long until asking again may help, ms, at nowMs: 0 when unknown. */
export declare function retryAfterOf(d: StoredDenial, nowMs: number): number;
