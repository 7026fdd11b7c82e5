/** A template value: a string, an integer, a boolean, a list of strings or of objects. */
export type Value = string | number | boolean | readonly string[] | readonly Scope[] | undefined;
/** Scope is one level of names a template reads. */
export type Scope = {
    readonly [name: string]: Value;
};
type Node = {
    kind: "text";
    text: string;
} | {
    kind: "var";
    name: string;
    filter: "" | "json" | "join";
} | {
    kind: "section";
    name: string;
    inverted: boolean;
    body: Node[];
};
/** parse reads a template into nodes; a malformed tag is an error, never text. */
export declare function parse(src: string): Node[];
/** jsonString escapes a string exactly as conformance/README.md says. */
export declare function jsonString(s: string): string;
/** render renders template src over input (README's rule: one final newline of the file is not part of it). */
export declare function render(src: string, input: Scope): string;
/** DenialFields are the inputs of the tool-result template, in this client's names. */
export interface DenialFields {
    tool: string;
    breaker: string;
    reason: string;
    retryAfterMs: number;
    alternatives: readonly string[];
    scope: string;
    forced: boolean;
    degraded: boolean;
    probeInFlight: boolean;
}
/** renderToolResult renders the circuit_open JSON a model receives for a denial. */
export declare function renderToolResult(d: DenialFields): string;
/** NoticeEntry is one tool a run lost, as the notice reads it. */
export interface NoticeEntry {
    tool: string;
    scope: string;
    status: "circuit_open" | "probe_in_flight";
    reason: string;
    forced: boolean;
    /** When its circuit's next probe is due or its force ends, ms since the epoch; 0 when unknown. */
    mayReturnAtMs: number;
    alternatives: readonly string[];
    degraded: boolean;
}
/** about renders a wait of ms (≥ 1000) as conformance/README.md's about(): "1h5m", "2m30s", "45s". */
export declare function about(ms: number): string;
/** renderNotice renders the run notice over the tools a run lost, at `now` (ms); "" when none. */
export declare function renderNotice(lost: readonly NoticeEntry[], now: number): string;
export {};
