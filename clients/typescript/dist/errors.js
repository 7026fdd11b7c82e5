// The errors the client throws. Each is a class a caller can catch with
// instanceof and read fields from; none is a string to parse.
/** BreakerdError is the base of every error this client throws about breakerd itself. */
export class BreakerdError extends Error {
    name = "BreakerdError";
}
/**
 * ConfigError is a bad client option (a malformed URL, an empty workerId):
 * `field` names the option.
 */
export class ConfigError extends BreakerdError {
    field;
    name = "ConfigError";
    constructor(field, message) {
        super(`${field}: ${message}`);
        this.field = field;
    }
}
/**
 * APIError is breakerd's refusal of a request: `code` is the gRPC code's
 * name ("invalid_argument", "permission_denied", ...), `violations` the
 * fields it named. A refused breaker name is one (InvalidArgument with
 * the field "breaker"). Never answered from the fallback.
 */
export class APIError extends BreakerdError {
    code;
    violations;
    status;
    url;
    name = "APIError";
    constructor(code, message, violations, status, url) {
        super(violations.length > 0 ? `breakerd refused the request (${code}): ${message}` : `breakerd: ${code}: ${message}`);
        this.code = code;
        this.violations = violations;
        this.status = status;
        this.url = url;
    }
}
/**
 * AuthError is a 401 or 403 from breakerd: the token is missing, wrong, or
 * lacks the role. `status` is the HTTP status. Never answered from the
 * fallback: a bad token is not an outage.
 */
export class AuthError extends APIError {
    name = "AuthError";
}
/**
 * ProtocolError is an answer that is not breakerd's JSON (an HTML page from
 * a proxy, garbage, a wrong content type): the URL is probably not a
 * breakerd HTTP listener. Never answered from the fallback.
 */
export class ProtocolError extends BreakerdError {
    url;
    status;
    contentType;
    name = "ProtocolError";
    constructor(url, status, contentType, detail) {
        super(`${url} did not answer as breakerd's HTTP/JSON API (HTTP ${status}, content-type ${JSON.stringify(contentType)}): ${detail}`);
        this.url = url;
        this.status = status;
        this.contentType = contentType;
    }
}
/**
 * UnreachableError says no daemon answered within the budget. The client
 * answers from its fallback instead of throwing it; get and getPolicy,
 * which have no fallback, throw it.
 */
export class UnreachableError extends BreakerdError {
    causes;
    name = "UnreachableError";
    constructor(message, causes) {
        // cause: the last daemon's failure (causes holds each one's).
        super(message, causes.length > 0 ? { cause: causes[causes.length - 1] } : undefined);
        this.causes = causes;
    }
}
/**
 * ReachableAgain is a notice, not a failure: onError gets it once when a
 * daemon answers again after no daemon did (an UnreachableError said the
 * loss, once).
 */
export class ReachableAgain extends BreakerdError {
    name = "ReachableAgain";
}
/**
 * CircuitOpenError is thrown, without calling the dependency, when
 * breakerd (or, when it is unreachable, this worker's fallback) denies the
 * call. `toolResult` is the text to hand the model as the tool's output.
 */
export class CircuitOpenError extends Error {
    name = "CircuitOpenError";
    breaker;
    tool;
    decision;
    reason;
    retryAfterMs;
    alternatives;
    scope;
    forced;
    degraded;
    toolResult;
    denial;
    constructor(d) {
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
