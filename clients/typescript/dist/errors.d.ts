import type { StoredDenial } from "./denial.js";
import type { Decision } from "./wire.js";
/** BreakerdError is the base of every error this client throws about breakerd itself. */
export declare class BreakerdError extends Error {
    name: string;
}
/**
 * ConfigError is a bad client option (a malformed URL, an empty workerId):
 * `field` names the option.
 */
export declare class ConfigError extends BreakerdError {
    readonly field: string;
    name: string;
    constructor(field: string, message: string);
}
/** FieldViolation names one bad field of a request, as breakerd reports it. */
export interface FieldViolation {
    field: string;
    description: string;
}
/**
 * APIError is breakerd's refusal of a request: `code` is the gRPC code's
 * name ("invalid_argument", "permission_denied", ...), `violations` the
 * fields it named. A refused breaker name is one (InvalidArgument with
 * the field "breaker"). Never answered from the fallback.
 */
export declare class APIError extends BreakerdError {
    readonly code: string;
    readonly violations: FieldViolation[];
    readonly status: number;
    readonly url: string;
    name: string;
    constructor(code: string, message: string, violations: FieldViolation[], status: number, url: string);
}
/**
 * AuthError is a 401 or 403 from breakerd: the token is missing, wrong, or
 * lacks the role. `status` is the HTTP status. Never answered from the
 * fallback: a bad token is not an outage.
 */
export declare class AuthError extends APIError {
    name: string;
}
/**
 * ProtocolError is an answer that is not breakerd's JSON (an HTML page from
 * a proxy, garbage, a wrong content type): the URL is probably not a
 * breakerd HTTP listener. Never answered from the fallback.
 */
export declare class ProtocolError extends BreakerdError {
    readonly url: string;
    readonly status: number;
    readonly contentType: string;
    name: string;
    constructor(url: string, status: number, contentType: string, detail: string);
}
/**
 * UnreachableError says no daemon answered within the budget. The client
 * answers from its fallback instead of throwing it; get and getPolicy,
 * which have no fallback, throw it.
 */
export declare class UnreachableError extends BreakerdError {
    readonly causes: unknown[];
    name: string;
    constructor(message: string, causes: unknown[]);
}
/**
 * ReachableAgain is a notice, not a failure: onError gets it once when a
 * daemon answers again after no daemon did (an UnreachableError said the
 * loss, once).
 */
export declare class ReachableAgain extends BreakerdError {
    name: string;
}
/** What a CircuitOpenError carries. */
export interface Denial {
    breaker: string;
    tool: string;
    decision: Decision;
    reason: string;
    retryAfterMs: number;
    alternatives: string[];
    scope: string;
    forced: boolean;
    degraded: boolean;
    /** The JSON text a model receives as the tool's output. */
    toolResult: string;
    /** The denial as breakerd decided and worded it (or the fallback's own); undefined when not known. */
    denial?: StoredDenial | undefined;
}
/**
 * CircuitOpenError is thrown, without calling the dependency, when
 * breakerd (or, when it is unreachable, this worker's fallback) denies the
 * call. `toolResult` is the text to hand the model as the tool's output.
 */
export declare class CircuitOpenError extends Error implements Denial {
    name: string;
    readonly breaker: string;
    readonly tool: string;
    readonly decision: Decision;
    readonly reason: string;
    readonly retryAfterMs: number;
    readonly alternatives: string[];
    readonly scope: string;
    readonly forced: boolean;
    readonly degraded: boolean;
    readonly toolResult: string;
    readonly denial: StoredDenial | undefined;
    constructor(d: Denial);
}
