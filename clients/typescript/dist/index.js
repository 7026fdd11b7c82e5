// @breakerd/client: breakerd's TypeScript client. The core imports
// nothing but the platform (fetch, AbortSignal, TextDecoder).
export { Client, EXCLUDED_OUTCOME, FAST_NOT_SENT, denialError } from "./client.js";
export { checkName } from "./check.js";
export { FastView, MAX_FAST_BREAKERS } from "./fast.js";
export { Run, breakerOf } from "./run.js";
export { APIError, AuthError, BreakerdError, CircuitOpenError, ConfigError, ProtocolError, ReachableAgain, UnreachableError } from "./errors.js";
export { ErrorKind, HttpError, MalformedOutputError, WAIT_HEADERS, bodyCode, evidenceOfError, evidenceOfResponse, isResponse, throwForStatus } from "./evidence.js";
export { denialOfState, fallbackDenial, storeDenial } from "./denial.js";
export { LocalBreaker, DEFAULT_LOCAL_POLICY, effectOfOutcome, localEffect } from "./fallback.js";
export { about, derive, inputOf, render, renderNotice, renderNoticeInputs, renderToolFailure, renderToolResult, renderToolResultInput } from "./render.js";
export { OpenCache } from "./cache.js";
export { DEFAULT_SAVINGS_INTERVAL_MS, MAX_SAVINGS_BATCH, MAX_SAVINGS_COUNT, MAX_SAVINGS_HELD, Savings } from "./savings.js";
export { readSSE } from "./sse.js";
export { int64 } from "./wire.js";
