/**
 * OpenTelemetry, when the application uses it (docs/observability.md):
 * the caller's W3C trace context goes to breakerd with each request, and a
 * guarded call's decision and outcome are recorded on the active span.
 *
 * The client imports nothing: it reads what @opentelemetry/api registers
 * on globalThis (its 1.x registry: the context manager, the propagator) once
 * the application registers an SDK. Without one every hook is one lookup.
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
