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
/** inject adds the active trace context (traceparent) to headers through the application's propagator. */
export declare function inject(headers: Record<string, string>): void;
/** decision records an Allow's answer on the active span. */
export declare function decision(p: Permit): void;
/** outcome records a Record's outcome, and whether it counted, on the active span. */
export declare function outcome(r: RecordResult): void;
/** toolRemoved is a tool a run removed, as an event on the active span. */
export declare function toolRemoved(u: Unavailable): void;
/**
 * toolSpan runs fn inside a span of the client's own, `execute_tool <tool>`
 * (the GenAI conventions' tool span), for a framework that starts no
 * OpenTelemetry span around its tools: the active span's child, active
 * while fn runs, so the decision and the traceparent are the tool call's.
 * Without a registered tracer provider and context manager it is fn().
 */
export declare function toolSpan<T>(tool: string, fn: () => Promise<T>): Promise<T>;
