/**
 * OpenTelemetry, when the application uses it (docs/observability.md):
 * the caller's W3C trace context goes to breakerd with each request, and a
 * guarded call's decision and outcome are recorded on the active span.
 *
 * The client imports nothing: it reads what @opentelemetry/api registers
 * on globalThis (its 1.x registry: the context manager, the propagator, the
 * tracer provider) once the application registers an SDK. Without one every
 * hook is one lookup.
 */
import type { Permit, RecordResult } from "./client.js";
import type { Unavailable } from "./run.js";

type Attrs = Record<string, string | number | boolean>;
interface Span {
  isRecording(): boolean;
  setAttributes(a: Attrs): unknown;
  addEvent(name: string, a: Attrs): unknown;
}
interface Context {
  getValue(key: symbol): unknown;
  setValue(key: symbol, value: unknown): Context;
}
interface OwnSpan extends Span {
  setStatus(s: { code: number; message?: string }): unknown;
  end(): void;
}
interface Registry {
  context?: { active(): Context; with<T>(ctx: Context, fn: () => T): T };
  trace?: { getTracer(name: string, version?: string): { startSpan(name: string, o: { kind: number; attributes: Attrs }, ctx: Context): OwnSpan } };
  propagation?: { inject(ctx: Context, carrier: Record<string, string>, setter: { set(c: Record<string, string>, k: string, v: string): void }): void };
}

/** The key @opentelemetry/api 1.x keeps its globals under, and the context key of the active span. */
const REGISTRY = Symbol.for("opentelemetry.js.api.1");
const SPAN_KEY = Symbol.for("OpenTelemetry Context Key SPAN");
const setter = { set: (c: Record<string, string>, k: string, v: string): void => { c[k] = v; } };

function registry(): Registry | undefined {
  return (globalThis as Record<symbol, Registry | undefined>)[REGISTRY];
}

/** inject adds the active trace context (traceparent) to headers through the application's propagator. */
export function inject(headers: Record<string, string>): void {
  const r = registry();
  const ctx = r?.context?.active();
  if (ctx && r?.propagation) r.propagation.inject(ctx, headers, setter);
}

function activeSpan(): Span | undefined {
  const span = registry()?.context?.active().getValue(SPAN_KEY) as Span | undefined;
  return span && typeof span.isRecording === "function" && span.isRecording() ? span : undefined;
}

const word = (v: string, prefix: string): string => (v.startsWith(prefix) ? v.slice(prefix.length) : v).toLowerCase();

/** decision records an Allow's answer on the active span. */
export function decision(p: Permit): void {
  const span = activeSpan();
  if (!span) return;
  const a: Attrs = { "breakerd.breaker": p.breaker, "breakerd.decision": word(p.decision, "DECISION_"), "breakerd.degraded": p.degraded };
  if (p.denial) {
    a["breakerd.denial.status"] = p.denial.status;
    a["breakerd.denial.scope"] = p.denial.scope;
    if (Number.isFinite(p.denial.untilMs)) a["breakerd.deny_until_ms"] = p.denial.untilMs;
  }
  span.setAttributes(a);
}

/** outcome records a Record's outcome, and whether it counted, on the active span. */
export function outcome(r: RecordResult): void {
  activeSpan()?.setAttributes({ "breakerd.outcome": word(r.classifiedAs, "OUTCOME_"), "breakerd.outcome.counted": r.counted });
}

/** toolRemoved is a tool a run removed, as an event on the active span. */
export function toolRemoved(u: Unavailable): void {
  activeSpan()?.addEvent("breakerd.tool_removed", { "breakerd.tool": u.tool, "breakerd.breaker": u.breaker, "breakerd.denial.status": u.denial.status, "breakerd.degraded": u.degraded });
}

/** SpanKind.INTERNAL and SpanStatusCode.ERROR, as @opentelemetry/api numbers them. */
const INTERNAL = 1;
const ERROR = 2;

/**
 * toolSpan runs fn inside a span of the client's own, `execute_tool <tool>`
 * (the GenAI conventions' tool span), for a framework that starts no
 * OpenTelemetry span around its tools: the active span's child, active
 * while fn runs, so the decision and the traceparent are the tool call's.
 * Without a registered tracer provider and context manager it is fn().
 */
export async function toolSpan<T>(tool: string, fn: () => Promise<T>): Promise<T> {
  const r = registry();
  if (!r?.trace || !r.context) return fn();
  const parent = r.context.active();
  const attributes = { "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool };
  const span = r.trace.getTracer("@breakerd/client").startSpan(`execute_tool ${tool}`, { kind: INTERNAL, attributes }, parent);
  try {
    return await r.context.with(parent.setValue(SPAN_KEY, span), fn);
  } catch (err) {
    span.setStatus({ code: ERROR, message: err instanceof Error ? err.message : String(err) });
    throw err;
  } finally {
    span.end();
  }
}
