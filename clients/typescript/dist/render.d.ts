import type { StoredDenial } from "./denial.js";
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
/**
 * TemplateInput is one denial as the templates take it
 * (conformance/README.md): the daemon's words and flags, the tool's
 * name, the alternatives, the degraded flag and when it may be back.
 */
export interface TemplateInput {
    tool: string;
    status: string;
    reason: string;
    forced: boolean;
    degraded: boolean;
    /** breaker, parent or worker. */
    scope: string;
    alternatives: readonly string[];
    /** ms since the epoch; 0 when unknown. */
    may_return_at_ms: number;
}
/** Shown is one denial to render: what the client stored, for the tool the model knows. */
export interface Shown {
    tool: string;
    denial: StoredDenial;
    alternatives: readonly string[];
    degraded: boolean;
}
/** inputOf is a stored denial's template input. */
export declare function inputOf(s: Shown): TemplateInput;
/** about renders a wait of ms (≥ 1000) as conformance/README.md's about(): "1h5m", "2m30s", "45s". */
export declare function about(ms: number): string;
/**
 * derive adds to one denial's inputs the fields every renderer derives
 * (conformance/README.md's table), at the clock nowMs; the template does
 * the rest.
 */
export declare function derive(d: TemplateInput, nowMs: number): Scope;
/** renderToolResult renders the JSON a model receives in place of a denied call's output, at the clock nowMs. */
export declare function renderToolResult(s: Shown, nowMs: number): string;
/** renderToolResultInput renders the tool result over one denial's template inputs at the clock nowMs. */
export declare function renderToolResultInput(d: TemplateInput, nowMs: number): string;
/** renderNoticeInputs renders the run notice over denials' inputs at the clock nowMs; "" when none. */
export declare function renderNoticeInputs(denials: readonly TemplateInput[], nowMs: number): string;
/** renderNotice renders the run notice over the tools a run lost, at the clock nowMs; "" when none. */
export declare function renderNotice(lost: readonly Shown[], nowMs: number): string;
/**
 * renderToolFailure renders what a framework adapter gives the model for
 * a failed call of tool that breakerd did not deny (tool_failure.tmpl), in
 * place of the framework's own invitation to try again.
 */
export declare function renderToolFailure(tool: string): string;
export {};
