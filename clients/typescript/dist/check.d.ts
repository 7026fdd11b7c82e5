import type { CallOptions, ClientOptions, GuardOptions, Permit, RecordOptions } from "./client.js";
import type { Evidence } from "./wire.js";
/** A Check says why a value is refused, or returns undefined when it passes. */
export type Check = (v: unknown) => string | undefined;
/** typeOf is a value's type as a message names it: null and an array apart from an object. */
export declare function typeOf(v: unknown): string;
/**
 * checkClientOptions refuses, with a ConfigError naming the option, a key
 * that is not an option (a misspelling would otherwise be ignored), and an
 * option that is malformed; an option left undefined takes its default.
 */
export declare function checkClientOptions(o: unknown): asserts o is ClientOptions;
/**
 * checkName refuses a breaker name breakerd would refuse, before any
 * round trip, so that a bad name is an error and never an answer of the
 * fallback (the same words as the daemon's InvalidArgument).
 */
export declare function checkName(field: string, v: unknown): void;
/** checkTool refuses a tool name breakerd would refuse, before any round trip. */
export declare function checkTool(v: unknown): void;
/** The checks of each call's options: every key of its type. */
export declare const CALL_OPTIONS: {
    readonly [K in keyof Required<CallOptions>]: Check;
};
export declare const GUARD_OPTIONS: {
    readonly [K in keyof Required<GuardOptions>]: Check;
};
export declare const RECORD_OPTIONS: {
    readonly [K in keyof Required<RecordOptions>]: Check;
};
/**
 * checkCallOptions refuses a call's options that checks does not pass,
 * naming the option; an option left undefined is absent. A key checks
 * does not know is left alone (the adapters pass options of their own
 * through).
 */
export declare function checkCallOptions(opts: unknown, checks: Readonly<Record<string, Check>>): void;
/** checkPermit refuses a value that is not a Permit (record's first argument). */
export declare function checkPermit(p: unknown): asserts p is Permit;
/**
 * evidenceOf is record's evidence: undefined and null are none (a
 * success, as {} is); anything but a plain object is refused, an Error
 * too (it would be sent as {}, a success).
 */
export declare function evidenceOf(ev: unknown): Evidence;
