// What a tool call threw or returned, as the raw evidence breakerd
// classifies. No outcome is decided here: the daemon holds the one table
// (conformance/classification); this file only reads JavaScript's shapes
// of a failure (a Response, an SDK's API error, axios's error, Node's
// system errors) into the language-neutral fields.
import { CircuitOpenError } from "./errors.js";
/** The error_kind values this client sends. */
export const ErrorKind = {
    dns: "ERROR_KIND_DNS",
    tls: "ERROR_KIND_TLS",
    refused: "ERROR_KIND_REFUSED",
    reset: "ERROR_KIND_RESET",
    timeout: "ERROR_KIND_TIMEOUT",
    cancelled: "ERROR_KIND_CANCELLED",
    malformedOutput: "ERROR_KIND_MALFORMED_OUTPUT",
    breakerdDenial: "ERROR_KIND_BREAKERD_DENIAL",
    other: "ERROR_KIND_OTHER",
};
/**
 * WAIT_HEADERS are the response headers sent as evidence: the ones that
 * say how long to wait (breakerd reads every one of them), lower-cased.
 * No other header leaves the process.
 */
export const WAIT_HEADERS = [
    "retry-after",
    "retry-after-ms",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-reset",
    "anthropic-ratelimit-output-tokens-reset",
    "ratelimit-reset",
];
/**
 * MalformedOutputError marks a call whose dependency answered with output
 * the tool's validator rejected; throw it (or wrap it as `cause`) from a
 * guarded function to have the call counted as malformed output.
 */
export class MalformedOutputError extends Error {
    name = "MalformedOutputError";
}
/**
 * HttpError is a dependency's answer with a failing HTTP status, thrown by
 * tool code: guard sends its status (and its wait headers, its date and
 * its body's error code) as evidence, so that a 503 is a server error
 * rather than an error breakerd cannot name. throwForStatus builds one
 * from a fetch Response.
 */
export class HttpError extends Error {
    name = "HttpError";
    /** The HTTP status. */
    status;
    /** The response's headers (a Headers, a Map or a plain object); undefined when unknown. */
    headers;
    /** The response's body (text or parsed JSON), whose error code is sent; undefined when unread. */
    body;
    constructor(status, o = {}) {
        if (!Number.isInteger(status) || status < 100 || status > 599)
            throw new RangeError(`HttpError: status must be an integer from 100 to 599, got ${String(status)}`);
        super(o.message ?? `HTTP ${status}`, o.cause === undefined ? undefined : { cause: o.cause });
        this.status = status;
        this.headers = o.headers;
        this.body = o.body;
    }
}
/**
 * throwForStatus returns a fetch Response whose status is below 400 as
 * it is, and throws an HttpError for any other, carrying its status, its
 * headers and its body's text (read here: the Response is spent):
 *
 *	const res = await throwForStatus(await fetch(url));
 */
export async function throwForStatus(res) {
    if (res.status < 400)
        return res;
    const body = await res.text().catch(() => undefined);
    const where = res.url ? ` from ${res.url}` : "";
    throw new HttpError(res.status, { message: `HTTP ${res.status}${where}`, headers: res.headers, body });
}
/** Node's and undici's error codes, by the error_kind they are. */
const CODE_KINDS = {
    ENOTFOUND: ErrorKind.dns,
    EAI_AGAIN: ErrorKind.dns,
    EAI_FAIL: ErrorKind.dns,
    EAI_NONAME: ErrorKind.dns,
    ECONNREFUSED: ErrorKind.refused,
    ECONNRESET: ErrorKind.reset,
    EPIPE: ErrorKind.reset,
    ECONNABORTED: ErrorKind.timeout, // axios: "timeout of N ms exceeded"
    UND_ERR_SOCKET: ErrorKind.reset,
    UND_ERR_CLOSED: ErrorKind.reset,
    ETIMEDOUT: ErrorKind.timeout,
    ESOCKETTIMEDOUT: ErrorKind.timeout,
    UND_ERR_CONNECT_TIMEOUT: ErrorKind.timeout,
    UND_ERR_HEADERS_TIMEOUT: ErrorKind.timeout,
    UND_ERR_BODY_TIMEOUT: ErrorKind.timeout,
    ERR_CANCELED: ErrorKind.cancelled, // axios's CanceledError
};
/** TLS failures: Node's certificate codes and OpenSSL's. */
function isTLSCode(code) {
    return (code.startsWith("ERR_TLS_") ||
        code.startsWith("ERR_SSL_") ||
        code.startsWith("CERT_") ||
        code.startsWith("UNABLE_TO_") ||
        code === "DEPTH_ZERO_SELF_SIGNED_CERT" ||
        code === "SELF_SIGNED_CERT_IN_CHAIN" ||
        code === "HOSTNAME_MISMATCH");
}
function isObj(v) {
    return typeof v === "object" && v !== null;
}
/** headerGetter reads a Headers, a Map or a plain object of headers, by lower-cased name. */
function headerGetter(h) {
    if (!isObj(h))
        return undefined;
    if (typeof h.get === "function") {
        const get = h.get.bind(h);
        return (n) => str(get(n));
    }
    const lower = new Map();
    for (const [k, v] of Object.entries(h))
        lower.set(k.toLowerCase(), v);
    return (n) => str(lower.get(n));
}
function str(v) {
    if (typeof v === "string")
        return v;
    if (typeof v === "number")
        return String(v);
    if (Array.isArray(v) && v.length > 0)
        return str(v[0]);
    return undefined;
}
/** responseEvidence reads a status and headers (any of their shapes) into evidence. */
function responseEvidence(status, headers, body) {
    const ev = { http_status: status };
    const get = headerGetter(headers);
    if (get) {
        const hs = {};
        for (const n of WAIT_HEADERS) {
            const v = get(n);
            if (v !== undefined && v !== "")
                hs[n] = v;
        }
        if (Object.keys(hs).length > 0)
            ev.headers = hs;
        const date = get("date");
        if (date)
            ev.date = date;
    }
    const code = bodyCode(body);
    if (code)
        ev.body_error_code = code;
    return ev;
}
/**
 * bodyCode is the error code a JSON error body names: error.code, else
 * error.type, else a top-level code (OpenAI's
 * {"error":{"code":"insufficient_quota"}}, Anthropic's
 * {"type":"error","error":{"type":"rate_limit_error"}}); "" when none.
 */
export function bodyCode(body) {
    if (typeof body === "string") {
        try {
            body = JSON.parse(body);
        }
        catch {
            return "";
        }
    }
    if (!isObj(body))
        return "";
    const inner = body["error"];
    if (isObj(inner)) {
        const c = str(inner["code"]) ?? str(inner["type"]);
        if (c)
            return c.slice(0, 64);
    }
    return (str(body["code"]) ?? "").slice(0, 64);
}
/**
 * sdkBody turns an SDK error's `error` field into a body bodyCode reads:
 * Anthropic's SDK keeps the whole body ({"type":"error","error":{...}}),
 * OpenAI's keeps only the inner object ({"code":...,"type":...}).
 */
function sdkBody(v) {
    return isObj(v) && !isObj(v["error"]) ? { error: v } : v;
}
/** isResponse tells a fetch Response (or one that looks like it) from other values. */
export function isResponse(v) {
    return (isObj(v) &&
        typeof v["status"] === "number" &&
        typeof v["ok"] === "boolean" &&
        isObj(v["headers"]) &&
        typeof v["headers"].get === "function");
}
/**
 * evidenceOfResponse reads a fetch Response: its status and the headers
 * that say how long to wait. The body is not read (it stays the caller's);
 * use evidenceOfError with an error that carries the parsed body to send
 * its error code.
 */
export function evidenceOfResponse(res) {
    return responseEvidence(res.status, res.headers, undefined);
}
/** codeOf walks an error and its causes for a Node or undici error code. */
function codeKind(err) {
    for (let e = err, depth = 0; isObj(e) && depth < 8; e = e["cause"], depth++) {
        const code = str(e["code"]);
        if (code) {
            if (CODE_KINDS[code])
                return CODE_KINDS[code];
            if (isTLSCode(code))
                return ErrorKind.tls;
        }
        const name = str(e["name"]);
        if (name === "TimeoutError" || name === "ConnectTimeoutError" || name === "HeadersTimeoutError")
            return ErrorKind.timeout;
    }
    return undefined;
}
/**
 * evidenceOfError reads what a guarded function threw into evidence:
 *  - an inner CircuitOpenError: breakerd_denial (never counted against this breaker);
 *  - AbortError, an aborted `signal`, axios's CanceledError: cancelled;
 *    a TimeoutError (AbortSignal.timeout, the SDKs' timeouts): timeout;
 *  - an error with `status` and `headers` (an HttpError, OpenAI and
 *    Anthropic SDK API errors) or with `response.status` (axios), or an
 *    HttpError on the `cause` chain: the HTTP status, the wait headers,
 *    the date and the body's error code;
 *  - a MalformedOutputError: malformed_output;
 *  - Node's and undici's system errors, on the error or its `cause`
 *    chain (fetch's "fetch failed"): dns, tls, refused, reset, timeout;
 *  - anything else (a plain Error, a tool's own bug): other, which
 *    breakerd takes as an unrecognised error, counted only where the
 *    breaker's policy says so (count_unrecognised).
 */
export function evidenceOfError(err, opts = {}) {
    for (let e = err, depth = 0; isObj(e) && depth < 8; e = e["cause"], depth++) {
        if (e instanceof CircuitOpenError)
            return { error_kind: ErrorKind.breakerdDenial };
        if (e instanceof MalformedOutputError)
            return { error_kind: ErrorKind.malformedOutput };
    }
    if (opts.signal?.aborted) {
        const reason = opts.signal.reason;
        if (isObj(reason) && reason["name"] === "TimeoutError")
            return { error_kind: ErrorKind.timeout };
        return { error_kind: ErrorKind.cancelled };
    }
    if (!isObj(err))
        return { error_kind: ErrorKind.other };
    const name = str(err["name"]) ?? "";
    const ctor = isObj(err.constructor) || typeof err.constructor === "function" ? String(err.constructor.name ?? "") : "";
    if (name === "AbortError" || ctor === "APIUserAbortError" || ctor === "CanceledError")
        return { error_kind: ErrorKind.cancelled };
    if (name === "TimeoutError" || ctor.endsWith("TimeoutError"))
        return { error_kind: ErrorKind.timeout };
    if (isResponse(err))
        return evidenceOfResponse(err);
    if (typeof err["status"] === "number") {
        // The OpenAI and Anthropic SDKs: status, headers and the parsed error body.
        return responseEvidence(err["status"], err["headers"], sdkBody(err["error"] ?? err["body"]));
    }
    const res = err["response"];
    if (isObj(res) && typeof res["status"] === "number") {
        // axios: response.status, response.headers, response.data.
        return responseEvidence(res["status"], res["headers"], res["data"]);
    }
    for (let e = err["cause"], depth = 0; isObj(e) && depth < 8; e = e["cause"], depth++) {
        if (e instanceof HttpError)
            return responseEvidence(e.status, e.headers, sdkBody(e.body));
    }
    return { error_kind: codeKind(err) ?? ErrorKind.other };
}
