// Traces for the tests: the application's side (@opentelemetry/api's
// globals registered over an in-memory exporter, as an SDK's register()
// does) and the daemon's (an OTLP receiver, otlpsink from
// internal/tests/otlptest, built into build/otlpsink by npm's pretest;
// BREAKERD_OTLPSINK_BIN names another).

import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";

import { repoRoot, waitFor, within } from "./helpers.js";

/** Tracing is the application's registered OpenTelemetry. */
export interface Tracing {
  exporter: InMemorySpanExporter;
  /** disable unregisters the globals. */
  disable(): void;
}

/** registerTracing registers a tracer provider, a context manager and the W3C propagator as globals. */
export function registerTracing(): Tracing {
  const exporter = new InMemorySpanExporter();
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
  return {
    exporter,
    disable: () => {
      trace.disable();
      propagation.disable();
      context.disable();
    },
  };
}

/** SinkSpan is a span as otlpsink lists it. */
export interface SinkSpan {
  service: string;
  name: string;
  trace_id: string;
  span_id: string;
  parent_span_id: string;
  attributes: Record<string, unknown>;
}

/** Sink is a running otlpsink. */
export interface Sink {
  /** What OTEL_EXPORTER_OTLP_ENDPOINT names it by. */
  endpoint: string;
  /** The environment that makes a daemon export to it, each batch at once. */
  env: Record<string, string>;
  /** spanUnder waits until a span of the daemon's named name, parent's child, has arrived, and returns it. */
  spanUnder(parent: { traceId: string; spanId: string }, name: string): Promise<SinkSpan>;
  close(): void;
}

/** startSink starts otlpsink and reads its endpoint. */
export async function startSink(): Promise<Sink> {
  const bin = process.env["BREAKERD_OTLPSINK_BIN"] ?? join(repoRoot(), "clients", "typescript", "build", "otlpsink");
  const child = spawn(bin, [], { stdio: ["pipe", "pipe", "inherit"] });
  const endpoint = await within(
    "otlpsink's endpoint",
    new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout! }).once("line", resolve);
      child.once("error", reject).once("exit", (code) => reject(new Error(`otlpsink exited (${code}) before its endpoint`)));
    }),
  );
  const spans = async (): Promise<SinkSpan[]> => (await fetch(`${endpoint}/spans`)).json() as Promise<SinkSpan[]>;
  return {
    endpoint,
    env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf", OTEL_BSP_SCHEDULE_DELAY: "10" },
    async spanUnder(parent, name) {
      let found: SinkSpan | undefined;
      const matches = (s: SinkSpan) => s.service === "breakerd" && s.name === name && s.trace_id === parent.traceId && s.parent_span_id === parent.spanId;
      await waitFor(async () => (found = (await spans()).find(matches)) !== undefined, `the daemon's ${name} span under ${parent.spanId}`);
      return found!;
    },
    close: () => child.stdin!.end(),
  };
}
