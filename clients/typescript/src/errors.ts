// The errors the client throws. Each is a class a caller can catch with
// instanceof and read fields from; none is a string to parse.

import type { StoredDenial } from "./denial.js";
import type { Decision } from "./wire.js";

/** BreakerdError is the base of every error this client throws about breakerd itself. */
export class BreakerdError extends Error {
  override name = "BreakerdError";
}

/**
 * ConfigError is a bad client option (a malformed URL, an empty workerId):
 * `field` names the option.
 */
export class ConfigError extends BreakerdError {
  override name = "ConfigError";
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}`);
  }
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
export class APIError extends BreakerdError {
  override name = "APIError";
  constructor(
    readonly code: string,
    message: string,
    readonly violations: FieldViolation[],
    readonly status: number,
    readonly url: string,
  ) {
    super(violations.length > 0 ? `breakerd refused the request (${code}): ${message}` : `breakerd: ${code}: ${message}`);
  }
}

/**
 * AuthError is a 401 or 403 from breakerd: the token is missing, wrong, or
 * lacks the role. `status` is the HTTP status. Never answered from the
 * fallback: a bad token is not an outage.
 */
export class AuthError extends APIError {
  override name = "AuthError";
}

/**
 * ProtocolError is an answer that is not breakerd's JSON (an HTML page from
 * a proxy, garbage, a wrong content type): the URL is probably not a
 * breakerd HTTP listener. Never answered from the fallback.
 */
export class ProtocolError extends BreakerdError {
  override name = "ProtocolError";
  constructor(
    readonly url: string,
    readonly status: number,
    readonly contentType: string,
    detail: string,
  ) {
    super(`${url} did not answer as breakerd's HTTP/JSON API (HTTP ${status}, content-type ${JSON.stringify(contentType)}): ${detail}`);
  }
}

/**
 * UnreachableError says no daemon answered within the budget. The client
 * answers from its fallback instead of throwing it; get and getPolicy,
 * which have no fallback, throw it.
 */
export class UnreachableError extends BreakerdError {
  override name = "UnreachableError";
  constructor(
    message: string,
    readonly causes: unknown[],
  ) {
    // cause: the last daemon's failure (causes holds each one's).
    super(message, causes.length > 0 ? { cause: causes[causes.length - 1] } : undefined);
  }
}

/**
 * ReachableAgain is a notice, not a failure: onError gets it once when a
 * daemon answers again after no daemon did (an UnreachableError said the
 * loss, once).
 */
export class ReachableAgain extends BreakerdError {
  override name = "ReachableAgain";
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
export class CircuitOpenError extends Error implements Denial {
  override name = "CircuitOpenError";
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

  constructor(d: Denial) {
    super(`circuit open for ${d.breaker}: ${d.reason} (retry after ${d.retryAfterMs} ms)`);
    this.breaker = d.breaker;
    this.tool = d.tool;
    this.decision = d.decision;
    this.reason = d.reason;
    this.retryAfterMs = d.retryAfterMs;
    this.alternatives = [...d.alternatives];
    this.scope = d.scope;
    this.forced = d.forced;
    this.degraded = d.degraded;
    this.toolResult = d.toolResult;
    this.denial = d.denial;
  }
}
