// OpenTelemetry against a real daemon: with an application tracer
// provider and context manager registered (@opentelemetry/api, in-memory
// exporter), a call's decision and outcome land on the active span, its
// traceparent reaches the daemon (the open event carries the tripping
// call's trace id), and a tool a run removes is an event on the run's
// span. Without one registered, nothing is sent or recorded.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { Client, Run } from "../src/index.js";
import { inject } from "../src/otel.js";
import { startDaemon, uniq, type Daemon } from "./daemon.js";

const prefix = uniq();
const policy = `breakers:
  - match: "${prefix}*"
    threshold: 2
    min_workers: 2
    cooldown_base: 10m
`;
let d: Daemon;
before(async () => {
  d = await startDaemon({ policy });
});
after(async () => {
  await d?.stop();
});

test("without a registered OpenTelemetry, no traceparent is sent", () => {
  const h: Record<string, string> = {};
  inject(h);
  assert.deepEqual(h, {});
});

test("the decision, the outcome and the removed tool on the active span; the open event carries the trace id", async () => {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const cm = new AsyncLocalStorageContextManager().enable();
  context.setGlobalContextManager(cm);
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  try {
    const tracer = trace.getTracer("agent");
    const breaker = `${prefix}:payments`;
    const w1 = new Client({ urls: [d.url], workerId: "w1", allowBudgetMs: 5000 });
    const w2 = new Client({ urls: [d.url], workerId: "w2", allowBudgetMs: 5000 });
    await w1.record(await w1.allow(breaker), { http_status: 503 });
    const tripId = await tracer.startActiveSpan("execute_tool refund_charge", async (span) => {
      const p = await w2.allow(breaker);
      const r = await w2.record(p, { http_status: 503 }); // the second worker's failure: the trip
      assert.equal(r.counted, true);
      span.end();
      return span.spanContext().traceId;
    });
    const tool = exporter.getFinishedSpans().find((s) => s.name === "execute_tool refund_charge");
    assert.equal(tool?.attributes["breakerd.decision"], "allowed");
    assert.equal(tool?.attributes["breakerd.outcome"], "server_error");
    assert.equal(tool?.attributes["breakerd.outcome.counted"], true);

    const res = await fetch(`${d.url}/breakerd.v1.BreakerService/Events`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ breaker }),
    });
    const { events = [] } = (await res.json()) as { events?: { to?: string; kind?: string; trace_id?: string; traceId?: string }[] };
    const opened = events.filter((e) => e.to === "STATE_OPEN" && e.kind === "EVENT_KIND_TRANSITION").at(-1);
    assert.equal(opened?.trace_id ?? opened?.traceId, tripId, "the daemon read the traceparent");

    await tracer.startActiveSpan("invoke_agent", async (span) => {
      assert.equal((await w1.allow(breaker)).allowed, false);
      const run = new Run(w1);
      assert.deepEqual(await run.available([{ name: "refund_charge", breaker }]), []);
      span.end();
    });
    const run = exporter.getFinishedSpans().find((s) => s.name === "invoke_agent");
    assert.equal(run?.attributes["breakerd.decision"], "denied_open");
    assert.equal(run?.attributes["breakerd.denial.status"], "circuit_open");
    assert.ok(Number(run?.attributes["breakerd.deny_until_ms"]) > 0);
    const removed = run?.events.filter((e) => e.name === "breakerd.tool_removed") ?? [];
    assert.equal(removed.length, 1);
    assert.equal(removed[0]?.attributes?.["breakerd.tool"], "refund_charge");
  } finally {
    trace.disable();
    propagation.disable();
    context.disable();
  }
});
