// What a model reads: a denial's tool result and a run's notice, rendered
// from conformance/templates (the same bytes breakerd and every other
// client render from; src/templates.ts is generated from them) over the
// denials the client stored, the daemon's words and flags, with the
// tool's name, the alternatives, the degraded flag and the clock at
// answer time. The template syntax (a small subset of Mustache) and the
// derived fields are conformance/README.md's.

import type { StoredDenial } from "./denial.js";
import { NOTICE_TEMPLATE, TOOL_FAILURE_TEMPLATE, TOOL_RESULT_TEMPLATE } from "./templates.js";

/** A template value: a string, an integer, a boolean, a list of strings or of objects. */
export type Value = string | number | boolean | readonly string[] | readonly Scope[] | undefined;
/** Scope is one level of names a template reads. */
export type Scope = { readonly [name: string]: Value };

type Node =
  | { kind: "text"; text: string }
  | { kind: "var"; name: string; filter: "" | "json" | "join" }
  | { kind: "section"; name: string; inverted: boolean; body: Node[] };

const TAG = /\{\{([#^/]?)([a-z_]+)(\|json|\|join)?\}\}/y;

/** parse reads a template into nodes; a malformed tag is an error, never text. */
export function parse(src: string): Node[] {
  const stack: { name: string; inverted: boolean; body: Node[] }[] = [{ name: "", inverted: false, body: [] }];
  let i = 0;
  while (i < src.length) {
    const open = src.indexOf("{{", i);
    const top = stack[stack.length - 1]!;
    if (open < 0) {
      top.body.push({ kind: "text", text: src.slice(i) });
      break;
    }
    if (open > i) top.body.push({ kind: "text", text: src.slice(i, open) });
    TAG.lastIndex = open;
    const m = TAG.exec(src);
    if (!m) throw new Error(`template: bad tag at byte ${open}: ${JSON.stringify(src.slice(open, open + 24))}`);
    const [whole, sigil, name, filter] = m as unknown as [string, string, string, string | undefined];
    if (sigil === "#" || sigil === "^") {
      if (filter) throw new Error(`template: a section takes no filter: ${whole}`);
      stack.push({ name, inverted: sigil === "^", body: [] });
    } else if (sigil === "/") {
      const sec = stack.pop();
      if (!sec || stack.length === 0 || sec.name !== name) throw new Error(`template: ${whole} closes no open section`);
      stack[stack.length - 1]!.body.push({ kind: "section", name, inverted: sec.inverted, body: sec.body });
    } else {
      top.body.push({ kind: "var", name, filter: (filter?.slice(1) ?? "") as "" | "json" | "join" });
    }
    i = open + whole.length;
  }
  if (stack.length !== 1) throw new Error(`template: section ${stack[stack.length - 1]!.name} is not closed`);
  return stack[0]!.body;
}

/** isSet: a value is set unless absent, false, 0, "" or an empty list. */
function isSet(v: Value): boolean {
  if (Array.isArray(v)) return v.length > 0;
  return v !== undefined && v !== false && v !== 0 && v !== "";
}

/** lookup finds name in the innermost scope that has it. */
function lookup(scopes: readonly Scope[], name: string): Value {
  for (let i = scopes.length - 1; i >= 0; i--) {
    if (Object.prototype.hasOwnProperty.call(scopes[i], name)) return scopes[i]![name];
  }
  return undefined;
}

/** jsonString escapes a string exactly as conformance/README.md says. */
export function jsonString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (c < 0x20 || c === 0x7f) out += "\\u00" + c.toString(16).padStart(2, "0");
    else out += ch;
  }
  return out + '"';
}

function scalar(v: Value): string {
  if (v === undefined) return "";
  if (typeof v === "boolean") return v ? "true" : "false";
  if (typeof v === "number") return String(Math.trunc(v));
  if (typeof v === "string") return v;
  return (v as readonly unknown[]).map(String).join(", ");
}

function json(v: Value): string {
  if (typeof v === "string") return jsonString(v);
  if (Array.isArray(v)) return "[" + (v as readonly string[]).map(jsonString).join(",") + "]";
  return scalar(v);
}

function renderNodes(nodes: readonly Node[], scopes: Scope[]): string {
  let out = "";
  for (const n of nodes) {
    if (n.kind === "text") {
      out += n.text;
    } else if (n.kind === "var") {
      const v = lookup(scopes, n.name);
      out += n.filter === "json" ? json(v) : n.filter === "join" ? (Array.isArray(v) ? v.join(", ") : scalar(v)) : scalar(v);
    } else {
      const v = lookup(scopes, n.name);
      if (n.inverted) {
        if (!isSet(v)) out += renderNodes(n.body, scopes);
      } else if (Array.isArray(v) && v.length > 0 && typeof v[0] === "object") {
        for (const item of v as readonly Scope[]) out += renderNodes(n.body, [...scopes, item]);
      } else if (isSet(v)) {
        out += renderNodes(n.body, scopes);
      }
    }
  }
  return out;
}

/** render renders template src over input (README's rule: one final newline of the file is not part of it). */
export function render(src: string, input: Scope): string {
  return renderNodes(parse(src.endsWith("\n") ? src.slice(0, -1) : src), [input]);
}

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
export function inputOf(s: Shown): TemplateInput {
  const d = s.denial;
  return {
    tool: s.tool,
    status: d.status,
    reason: d.reason,
    forced: d.forced,
    degraded: s.degraded,
    scope: d.scope,
    alternatives: s.alternatives,
    may_return_at_ms: d.mayReturnAtMs,
  };
}

/** about renders a wait of ms (≥ 1000) as conformance/README.md's about(): "1h5m", "2m30s", "45s". */
export function about(ms: number): string {
  let s = Math.floor((ms + 500) / 1000);
  if (s >= 3600) s = Math.floor((s + 30) / 60) * 60;
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  return (h ? `${h}h` : "") + (m ? `${m}m` : "") + (sec ? `${sec}s` : "");
}

/**
 * derive adds to one denial's inputs the fields every renderer derives
 * (conformance/README.md's table), at the clock nowMs; the template does
 * the rest.
 */
export function derive(d: TemplateInput, nowMs: number): Scope {
  const testing = d.status === "probe_in_flight";
  const inMs = !testing && d.may_return_at_ms > 0 ? Math.max(d.may_return_at_ms - nowMs, 1000) : 0;
  const backIn = inMs > 0 ? about(inMs) : "";
  return {
    ...d,
    reason: d.reason.replace(/[. ]+$/, ""),
    parent: d.scope === "parent",
    testing,
    may_return_in_ms: inMs,
    back_in: backIn,
    no_end: !testing && backIn === "",
  };
}

/** renderToolResult renders the JSON a model receives in place of a denied call's output, at the clock nowMs. */
export function renderToolResult(s: Shown, nowMs: number): string {
  return renderToolResultInput(inputOf(s), nowMs);
}

/** renderToolResultInput renders the tool result over one denial's template inputs at the clock nowMs. */
export function renderToolResultInput(d: TemplateInput, nowMs: number): string {
  return render(TOOL_RESULT_TEMPLATE, { ...derive(d, nowMs), now_ms: nowMs });
}

/** renderNoticeInputs renders the run notice over denials' inputs at the clock nowMs; "" when none. */
export function renderNoticeInputs(denials: readonly TemplateInput[], nowMs: number): string {
  if (denials.length === 0) return "";
  return render(NOTICE_TEMPLATE, { denials: denials.map((d) => derive(d, nowMs)), now_ms: nowMs });
}

/** renderNotice renders the run notice over the tools a run lost, at the clock nowMs; "" when none. */
export function renderNotice(lost: readonly Shown[], nowMs: number): string {
  return renderNoticeInputs(lost.map(inputOf), nowMs);
}

/**
 * renderToolFailure renders what a framework adapter gives the model for
 * a failed call of tool that breakerd did not deny (tool_failure.tmpl), in
 * place of the framework's own invitation to try again.
 */
export function renderToolFailure(tool: string): string {
  return render(TOOL_FAILURE_TEMPLATE, { tool });
}
