/** An int64 as the proto3 JSON mapping writes it: a decimal string. */
export type Int64 = string;
/** Decision is breakerd's answer to Allow (proto enum breakerd.v1.Decision). */
export type Decision = "DECISION_UNSPECIFIED" | "DECISION_ALLOWED" | "DECISION_PROBE" | "DECISION_DENIED_OPEN" | "DECISION_DENIED_PROBE_IN_FLIGHT" | "DECISION_DENIED_FORCED_OPEN" | "DECISION_DENIED_SUSPECT_WORKER" | "DECISION_DENIED_PAUSED" | "DECISION_DENIED_PARENT_OPEN";
/** State is a breaker's state (proto enum breakerd.v1.State). */
export type State = "STATE_CLOSED" | "STATE_OPEN" | "STATE_HALF_OPEN" | "STATE_FORCED_OPEN" | "STATE_FORCED_CLOSED" | "STATE_PAUSED";
/** Ticket fences a Record to the Allow that granted it; pass it back unchanged. */
export interface Ticket {
    generation?: Int64;
    lease_token?: string;
    parent_generation?: Int64;
    parent_lease_token?: string;
    shadow_denied?: boolean;
}
/** BreakerState is a snapshot of one breaker (the fields this client reads). */
export interface BreakerState {
    breaker?: string;
    state?: State;
    generation?: Int64;
    failures?: Int64;
    reason?: string;
    last_failure?: string;
    opened_at_ms?: Int64;
    next_probe_at_ms?: Int64;
    forced_by?: string;
    alternatives?: string[];
    as_of_ms?: Int64;
    parent?: string;
    /**
     * Until when (breakerd's clock, ms since the epoch) an Allow by any
     * worker but a suspect one is denied; absent or 0 when it is not.
     */
    deny_until_ms?: Int64;
    /** The worker suspected of a local fault; "" when none. */
    suspect_worker?: string;
    /** The denial this state implies for the next Allow: the asking worker's where the call named one, the fleet's otherwise. */
    denial?: WireDenial | null;
    /** In a state sent to many: the suspect worker's own denial while it has one. */
    suspect_denial?: WireDenial | null;
    [field: string]: unknown;
}
/** DenialScope is what a denial puts out of service (proto enum breakerd.v1.DenialScope). */
export type DenialScope = "DENIAL_SCOPE_UNSPECIFIED" | "DENIAL_SCOPE_BREAKER" | "DENIAL_SCOPE_PARENT" | "DENIAL_SCOPE_WORKER";
/** WireDenial is one denial as breakerd decided and worded it (proto message breakerd.v1.Denial). */
export interface WireDenial {
    decision?: Decision;
    scope?: DenialScope;
    forced?: boolean;
    /** Until when it holds by itself (breakerd's clock); the largest int64 until an operator acts. */
    deny_until_ms?: Int64;
    /** When the tool may be back (breakerd's clock); 0 when unknown or while a probe is in flight. */
    may_return_at_ms?: Int64;
    reason?: string;
    status?: string;
}
export interface AllowRequest {
    breaker: string;
    worker_id: string;
    tool?: string;
    /** Ask for the breaker's policy in the answer (the client's first Allow of it). */
    with_policy?: boolean;
}
export interface AllowResponse {
    decision?: Decision;
    ticket?: Ticket;
    retry_after_ms?: Int64;
    reason?: string;
    state?: BreakerState;
    degraded?: boolean;
    scope?: string;
    shadow_decision?: Decision;
    /** For a denial: the JSON text a model receives as the tool's output. */
    tool_result?: string;
    /** For a denial: the denial, decided and worded by breakerd for this worker. */
    denial?: WireDenial | null;
    /** The breaker's effective policy, when the request set with_policy. */
    policy?: Policy | null;
}
/** ErrorKind is how a tool call failed (proto enum breakerd.v1.ErrorKind). */
export type ErrorKindName = "ERROR_KIND_DNS" | "ERROR_KIND_TLS" | "ERROR_KIND_REFUSED" | "ERROR_KIND_RESET" | "ERROR_KIND_TIMEOUT" | "ERROR_KIND_CANCELLED" | "ERROR_KIND_MALFORMED_OUTPUT" | "ERROR_KIND_BREAKERD_DENIAL" | "ERROR_KIND_OTHER";
/**
 * Evidence is what one tool call returned, raw (proto message
 * breakerd.v1.CallEvidence): breakerd classifies it
 * (conformance/classification.json holds the cases). Every field is
 * optional; an empty Evidence is a success.
 */
export interface Evidence {
    /** The response's HTTP status. */
    http_status?: number;
    /** Lower-cased response header names to values (the ones that say how long to wait). */
    headers?: Record<string, string>;
    /** The response's Date header, which an HTTP-date Retry-After is relative to. */
    date?: string;
    /** The error code a JSON error body names ("insufficient_quota"). */
    body_error_code?: string;
    /** The gRPC status code a gRPC dependency answered. */
    grpc_status?: number;
    /** The RetryInfo delay of that status, ms. */
    grpc_retry_delay_ms?: Int64;
    /** How the call failed, when it threw. */
    error_kind?: ErrorKindName;
    /** The call had no deadline: a rate limit is never counted. */
    no_deadline?: boolean;
}
export interface RecordRequest {
    breaker: string;
    worker_id: string;
    ticket: Ticket;
    outcome?: string;
    evidence?: Evidence;
    deadline_ms?: Int64;
    latency_ms?: Int64;
    message?: string;
    credential_worked?: boolean;
    /** This Record's id: sent again with it, the Record counts once. */
    record_id?: string;
}
export interface RecordResponse {
    counted?: boolean;
    note?: string;
    state?: BreakerState;
    degraded?: boolean;
    /** The outcome the record was taken as (an Outcome enum name). */
    classified_as?: string;
    /** Why, in plain words. */
    why?: string;
    [field: string]: unknown;
}
/** The daemon's JSON error body: the gRPC code's name, the message, the field violations. */
export interface ErrorBody {
    code?: string;
    message?: string;
    field_violations?: {
        field?: string;
        description?: string;
    }[];
    [field: string]: unknown;
}
/** int64 reads an Int64 (or a number) as a number; 0 when absent. */
export declare function int64(v: Int64 | number | undefined | null): number;
/** Policy is a breaker's effective policy (the fields this client reads). */
export interface Policy {
    threshold?: number;
    min_workers?: number;
    cooldown_base_ms?: Int64;
    cooldown_cap_ms?: Int64;
    probe_timeout_ms?: Int64;
    alternatives?: string[];
    [field: string]: unknown;
}
export interface GetPolicyResponse {
    breaker?: string;
    policy?: Policy;
    sources?: Record<string, string>;
}
