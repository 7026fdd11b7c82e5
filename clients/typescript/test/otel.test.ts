// OpenTelemetry against a real daemon: with an application tracer
// provider and context manager registered (@opentelemetry/api, in-memory
// exporter), a call's decision and outcome land on the active span, its
// traceparent reaches the daemon (the open event carries the tripping
// call's trace id), and a tool a run removes is an event on the run's
// span. Without one registered, nothing is sent or recorded; without one
// installed, nothing of it is imported.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { after, before, test } from "node:test";
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { Client, Run } from "../src/index.js";
import { inject } from "../src/otel.js";
import { startDaemon, uniq, type Daemon } from "./daemon.js";
import { within } from "./helpers.js";

const execFileP = promisify(execFile);

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

/** A module hook that makes every @opentelemetry/ package absent to import: resolving one throws. */
const BLOCK = `export async function resolve(specifier, context, next) {
  if (specifier.startsWith("@opentelemetry/")) throw new Error("blocked " + specifier);
  return next(specifier, context);
}`;

test("without OpenTelemetry installed, the client and its adapters load and call breakerd, importing none of it", async () => {
  const src = new URL("../src/", import.meta.url).href;
  const child = `
    import Module, { createRequire, register } from "node:module";
    register("data:text/javascript," + encodeURIComponent(${JSON.stringify(BLOCK)}));
    const resolve = Module._resolveFilename; // and to require
    Module._resolveFilename = function (req, ...rest) {
      if (req.startsWith("@opentelemetry/")) throw new Error("blocked " + req);
      return resolve.call(this, req, ...rest);
    };
    const control = await import("@opentelemetry/api").then(() => "loaded", (e) => e.message);
    let required = "loaded";
    try { createRequire(import.meta.url)("@opentelemetry/api"); } catch (e) { required = e.message; }
    const { Client, Run } = await import("${src}index.js");
    await import("${src}adapters/tools.js");
    const { guardToolOptions } = await import("${src}adapters/openai-agents.js");
    const run = new Run(new Client({ urls: process.argv[1], workerId: "no-otel", allowBudgetMs: 5000 }));
    const [def] = guardToolOptions(run, [{ name: "t", execute: async () => "ran" }], { breakers: { t: "${prefix}:no-otel" } });
    console.log(JSON.stringify({ control, required, out: await def.execute({}) }));`;
  const { stdout } = await within("the child without OpenTelemetry", execFileP(process.execPath, ["--input-type=module", "-e", child, d.url]));
  const got = JSON.parse(stdout) as { control: string; required: string; out: string };
  assert.equal(got.control, "blocked @opentelemetry/api", "the hook hides @opentelemetry/api from import");
  assert.equal(got.required, "blocked @opentelemetry/api", "and from require");
  assert.equal(got.out, "ran", "a guarded call went through breakerd");
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
