import type { Evidence } from "./wire.js";
/** The error_kind values this client sends. */
export declare const ErrorKind: {
    readonly dns: "ERROR_KIND_DNS";
    readonly tls: "ERROR_KIND_TLS";
    readonly refused: "ERROR_KIND_REFUSED";
    readonly reset: "ERROR_KIND_RESET";
    readonly timeout: "ERROR_KIND_TIMEOUT";
    readonly cancelled: "ERROR_KIND_CANCELLED";
    readonly malformedOutput: "ERROR_KIND_MALFORMED_OUTPUT";
    readonly breakerdDenial: "ERROR_KIND_BREAKERD_DENIAL";
    readonly other: "ERROR_KIND_OTHER";
};
/**
 * WAIT_HEADERS are the response headers sent as evidence: the ones that
 * say how long to wait (breakerd reads every one of them), lower-cased.
 * No other header leaves the process.
 */
export declare const WAIT_HEADERS: readonly string[];
/**
 * MalformedOutputError marks a call whose dependency answered with output
 * the tool's validator rejected; throw it (or wrap it as `cause`) from a
 * guarded function to have the call counted as malformed output.
 */
export declare class MalformedOutputError extends Error {
    name: string;
}
/**
 * HttpError is a dependency's answer with a failing HTTP status, thrown by
 * tool code: guard sends its status (and its wait headers, its date and
 * its body's error code) as evidence, so that a 503 is a server error
 * rather than an error breakerd cannot name. throwForStatus builds one
 * from a fetch Response.
 */
export declare class HttpError extends Error {
    name: string;
    /** The HTTP status. */
    readonly status: number;
    /** The response's headers (a Headers, a Map or a plain object); undefined when unknown. */
    readonly headers: unknown;
    /** The response's body (text or parsed JSON), whose error code is sent; undefined when unread. */
    readonly body: unknown;
    constructor(status: number, o?: {
        message?: string;
        headers?: unknown;
        body?: unknown;
        cause?: unknown;
    });
}
/**
 * throwForStatus returns a fetch Response whose status is below 400 as
 * it is, and throws an HttpError for any other, carrying its status, its
 * headers and its body's text (read here: the Response is spent):
 *
 *	const res = await throwForStatus(await fetch(url));
 */
export declare function throwForStatus(res: Response): Promise<Response>;
/**
 * bodyCode is the error code a JSON error body names: error.code, else
 * error.type, else a top-level code (OpenAI's
 * {"error":{"code":"insufficient_quota"}}, Anthropic's
 * {"type":"error","error":{"type":"rate_limit_error"}}); "" when none.
 */
export declare function bodyCode(body: unknown): string;
/** isResponse tells a fetch Response (or one that looks like it) from other values. */
export declare function isResponse(v: unknown): v is Response;
/**
 * evidenceOfResponse reads a fetch Response: its status and the headers
 * that say how long to wait. The body is not read (it stays the caller's);
 * use evidenceOfError with an error that carries the parsed body to send
 * its error code.
 */
export declare function evidenceOfResponse(res: Response): Evidence;
/** signalOf is the AbortSignal an options object holds, if any. */
export interface EvidenceOptions {
    /** The caller's signal: when it is aborted, the call was the caller's to cancel. */
    signal?: AbortSignal | undefined;
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
export declare function evidenceOfError(err: unknown, opts?: EvidenceOptions): Evidence;
