// What the client refuses before any round trip: a malformed option when a
// Client is made (a ConfigError naming it), and a call's bad input (an
// APIError invalid_argument naming the field, as breakerd words its own
// refusals), so that a mistake is an error and never an answer of the
// fallback. Written for callers from plain JavaScript too: every value is
// checked, whatever its type says.

import type { CallOptions, ClientOptions, GuardOptions, Permit, RecordOptions } from "./client.js";
import { APIError, ConfigError } from "./errors.js";
import type { Evidence } from "./wire.js";

/** A Check says why a value is refused, or returns undefined when it passes. */
export type Check = (v: unknown) => string | undefined;

/** typeOf is a value's type as a message names it: null and an array apart from an object. */
export function typeOf(v: unknown): string {
  return v === null ? "null" : Array.isArray(v) ? "array" : typeof v;
}

/** shown is a value as a message shows it: a string quoted, a number or a boolean as it is, anything else by its type. */
function shown(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v);
  return typeof v === "number" || typeof v === "boolean" ? String(v) : typeOf(v);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** MAX_TIMER_MS is the longest delay a timer holds (setTimeout's bound): a longer one fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

const isString: Check = (v) => (typeof v === "string" ? undefined : `must be a string, got ${typeOf(v)}`);
const isBoolean: Check = (v) => (typeof v === "boolean" ? undefined : `must be true or false, got ${shown(v)}`);
const isFunction: Check = (v) => (typeof v === "function" ? undefined : `must be a function, got ${typeOf(v)}`);
const isSignal: Check = (v) =>
  isObject(v) && typeof v["aborted"] === "boolean" && typeof v["addEventListener"] === "function" ? undefined : `must be an AbortSignal, got ${typeOf(v)}`;

/** positiveMs: a wait a timer bounds, above 0. */
const positiveMs: Check = (v) =>
  typeof v === "number" && v > 0 && v <= MAX_TIMER_MS ? undefined : `must be a number of ms above 0 and at most ${MAX_TIMER_MS}, got ${shown(v)}`;

/** intervalMs: a timer's interval, where 0 or less means never. */
const intervalMs: Check = (v) =>
  typeof v === "number" && v <= MAX_TIMER_MS ? undefined : `must be a number of ms at most ${MAX_TIMER_MS} (0 or less: never), got ${shown(v)}`;

/** finiteMs: a duration sent to breakerd (rounded, and 0 when negative). */
const finiteMs: Check = (v) => (typeof v === "number" && Number.isFinite(v) ? undefined : `must be a finite number of ms, got ${shown(v)}`);

const oneOf =
  (...allowed: string[]): Check =>
  (v) =>
    typeof v === "string" && allowed.includes(v) ? undefined : `must be ${allowed.map((a) => JSON.stringify(a)).join(" or ")}, got ${shown(v)}`;

/** The daemon's worker id syntax (internal/limits.WorkerID; docs/security.md#worker-ids). */
const WORKER_ID = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

const workerId: Check = (v) => {
  if (v === undefined || v === "") return "is required";
  if (typeof v !== "string") return isString(v);
  // Refused here: the daemon refuses every call with it, and the fallback would answer them all quietly meanwhile.
  if (!WORKER_ID.test(v)) return `must be 1 to 128 characters of A-Z a-z 0-9 . _ : @ / + = - (docs/security.md#worker-ids), got ${JSON.stringify(v)}`;
  return undefined;
};

/**
 * CLIENT_OPTIONS is every ClientOptions key (the type holds the table to
 * the interface) with its check. urls and watch are checked for their
 * shape here, their elements by checkClientOptions (urls: parseURLs).
 */
const CLIENT_OPTIONS: { readonly [K in keyof Required<ClientOptions>]: Check } = {
  urls: (v) => (typeof v === "string" || Array.isArray(v) ? undefined : `must be a URL or a list of URLs, got ${typeOf(v)}`),
  token: isString,
  workerId,
  allowBudgetMs: positiveMs,
  firstContactBudgetMs: positiveMs,
  rpcTimeoutMs: positiveMs,
  fallback: oneOf("local", "closed"),
  watch: (v) => (typeof v === "boolean" || Array.isArray(v) ? undefined : `must be true, false or a list of breaker names, got ${shown(v)}`),
  savingsIntervalMs: intervalMs,
  fast: isBoolean,
  fetch: isFunction,
  clock: isFunction,
  watchHeartbeatMs: positiveMs,
  onError: isFunction,
  exclude: isFunction,
};

/**
 * checkClientOptions refuses, with a ConfigError naming the option, a key
 * that is not an option (a misspelling would otherwise be ignored), and an
 * option that is malformed; an option left undefined takes its default.
 */
export function checkClientOptions(o: unknown): asserts o is ClientOptions {
  if (!isObject(o)) throw new ConfigError("options", `want { urls, workerId }, got ${typeOf(o)}`);
  const names = Object.keys(CLIENT_OPTIONS);
  for (const k of Object.keys(o)) {
    if (!names.includes(k)) throw new ConfigError(k, `is not an option of Client (${names.join(", ")})`);
  }
  for (const [k, check] of Object.entries(CLIENT_OPTIONS)) {
    const why = o[k] === undefined && k !== "workerId" ? undefined : check(o[k]);
    if (why !== undefined) throw new ConfigError(k, why);
  }
  const watch: unknown = o["watch"];
  if (!Array.isArray(watch)) return;
  for (const [i, b] of watch.entries()) {
    const why = nameProblem(b);
    if (why !== undefined) throw new ConfigError(`watch[${i}]`, why);
  }
}

/** refuse throws the APIError breakerd would answer for a bad field: invalid_argument, the field named. */
function refuse(field: string, why: string): never {
  throw new APIError("invalid_argument", `${field}: ${why}`, [{ field, description: why }], 0, "");
}

const MAX_NAME_BYTES = 256;
const NOT_PRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]|[^\P{Zs} ]/u;

/** nameProblem says why breakerd would refuse v as a breaker name (the daemon's words), or returns undefined. */
function nameProblem(v: unknown): string | undefined {
  if (v === undefined || v === "") return "is required";
  if (typeof v !== "string") return isString(v);
  const bytes = new TextEncoder().encode(v).length;
  if (bytes > MAX_NAME_BYTES) return `is ${bytes} bytes; at most ${MAX_NAME_BYTES}`;
  if (NOT_PRINTABLE.test(v)) return `must be printable UTF-8 (no control characters), got ${JSON.stringify(v)}`;
  if (v.trim() !== v) return `must not start or end with white space, got ${JSON.stringify(v)}`;
  return undefined;
}

/**
 * checkName refuses a breaker name breakerd would refuse, before any
 * round trip, so that a bad name is an error and never an answer of the
 * fallback (the same words as the daemon's InvalidArgument).
 */
export function checkName(field: string, v: unknown): void {
  const why = nameProblem(v);
  if (why !== undefined) refuse(field, why);
}

/** TOOL_NAME is MCP's tool-name syntax, which breakerd holds AllowRequest.tool to. */
const TOOL_NAME = /^[A-Za-z0-9_.-]{1,128}$/;

/** toolName says why breakerd would refuse v as a tool name ("" lets the breaker's name stand in). */
const toolName: Check = (v) => {
  if (typeof v !== "string") return isString(v);
  return v === "" || TOOL_NAME.test(v) ? undefined : `must be 1 to 128 of A-Z a-z 0-9 _ - ., got ${JSON.stringify(v)}`;
};

/** checkTool refuses a tool name breakerd would refuse, before any round trip. */
export function checkTool(v: unknown): void {
  const why = toolName(v);
  if (why !== undefined) refuse("tool", why);
}

/** The checks of each call's options: every key of its type. */
export const CALL_OPTIONS: { readonly [K in keyof Required<CallOptions>]: Check } = { tool: toolName, signal: isSignal };
export const GUARD_OPTIONS: { readonly [K in keyof Required<GuardOptions>]: Check } = { ...CALL_OPTIONS, deadlineMs: finiteMs, exclude: isFunction };
export const RECORD_OPTIONS: { readonly [K in keyof Required<RecordOptions>]: Check } = { outcome: isString, latencyMs: finiteMs, deadlineMs: finiteMs, signal: isSignal };

/**
 * checkCallOptions refuses a call's options that checks does not pass,
 * naming the option; an option left undefined is absent. A key checks
 * does not know is left alone (the adapters pass options of their own
 * through).
 */
export function checkCallOptions(opts: unknown, checks: Readonly<Record<string, Check>>): void {
  if (opts === undefined) return;
  if (!isObject(opts)) refuse("options", `must be an object, got ${typeOf(opts)}`);
  for (const [k, check] of Object.entries(checks)) {
    const why = opts[k] === undefined ? undefined : check(opts[k]);
    if (why !== undefined) refuse(k, why);
  }
}

/** checkPermit refuses a value that is not a Permit (record's first argument). */
export function checkPermit(p: unknown): asserts p is Permit {
  if (isObject(p) && typeof p["breaker"] === "string" && isObject(p["ticket"])) return;
  refuse("permit", `must be the Permit allow returned, got ${isObject(p) ? "an object without its breaker and ticket" : typeOf(p)}`);
}

/**
 * evidenceOf is record's evidence: undefined and null are none (a
 * success, as {} is); anything but a plain object is refused, an Error
 * too (it would be sent as {}, a success).
 */
export function evidenceOf(ev: unknown): Evidence {
  if (ev === undefined || ev === null) return {};
  if (ev instanceof Error) refuse("evidence", "is an Error, which would be sent as {} (a success): pass evidenceOfError(err)");
  if (!isObject(ev)) refuse("evidence", `must be an object (CallEvidence), got ${typeOf(ev)}`);
  return ev as Evidence;
}
