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
 *  - an error with `status` and `headers` (OpenAI and Anthropic SDK API
 *    errors) or with `response.status` (axios): the HTTP status, the
 *    wait headers, the date and the body's error code;
 *  - a MalformedOutputError: malformed_output;
 *  - Node's and undici's system errors, on the error or its `cause`
 *    chain (fetch's "fetch failed"): dns, tls, refused, reset, timeout;
 *  - anything else: other (counted as a transport failure).
 */
export declare function evidenceOfError(err: unknown, opts?: EvidenceOptions): Evidence;
