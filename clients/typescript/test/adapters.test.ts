// The framework adapters inside the real frameworks, with scripted models
// (the frameworks' own mocks: ai/test, a Model of the Agents SDK) and no
// network: a vendor outage seen by two workers trips the fleet's breaker
// on a real daemon, and the next run's tools lack the tool while the model
// reads the notice; within one run, a circuit that opens between the steps
// of one generateText or streamText takes the tool out of the remaining
// steps (prepareStep), and out of an @openai/agents run's remaining turns
// (guardedTool); a failed call reaches the model as the shared failure
// text rather than the framework's invitation to try again. The vendor is
// a server of the test's own that counts its requests (no call reaches it
// once the breaker is open). Traced, a denied call's tool span (the
// framework's, or the @openai/agents adapter's) carries the decision, and
// the daemon's Allow span, exported over OTLP, is its child.

import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, before, test } from "node:test";

import { trace, type Tracer } from "@opentelemetry/api";
import type { ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { Agent, Runner, RunContext, setTracingDisabled, tool as agentTool, type Model, type ModelRequest, type ModelResponse, Usage } from "@openai/agents";
import Anthropic from "@anthropic-ai/sdk";
import { generateText, jsonSchema, stepCountIs, streamText, tool as aiTool } from "ai";
import { convertArrayToReadableStream, MockLanguageModelV3 } from "ai/test";
import OpenAI from "openai";
import { z } from "zod";

import { Client, renderToolFailure, Run } from "../src/index.js";
import * as ai from "../src/adapters/ai.js";
import { guardTools, prepareStep, ToolFailedError } from "../src/adapters/ai.js";
import * as agents from "../src/adapters/openai-agents.js";
import { guardedTool, guardToolOptions } from "../src/adapters/openai-agents.js";
import * as plain from "../src/adapters/tools.js";
import { startDaemon, uniq, type Daemon } from "./daemon.js";
import { serve, within, type Served } from "./helpers.js";
import { registerTracing, startSink, type Sink, type Tracing } from "./otlp.js";
import { ScriptedModel } from "./scripted.js";

let daemon: Daemon;
let vendor: Served;
const prefix = uniq();
const policy = `breakers:\n  - match: "${prefix}*"\n    threshold: 2\n    min_workers: 2\n    cooldown_base: 10m\n    alternatives: [issue_refund_manually]\n`;

before(async () => {
  setTracingDisabled(true);
  daemon = await startDaemon({ policy });
  vendor = await serve((req, res) => {
    res.writeHead(req.url?.startsWith("/refund") ? 503 : 200, { "content-type": "application/json", "retry-after": "120" });
    res.end(req.url?.startsWith("/refund") ? '{"error":{"code":"upstream_down"}}' : '{"results":["a"]}');
  });
});
after(async () => {
  await daemon?.stop();
  await vendor?.close();
  await traced?.daemon.stop();
  traced?.sink.close();
});

/** A vendor call that throws what fetch-based SDKs throw for a failed answer: an error with status and headers. */
async function callVendor(path: string): Promise<unknown> {
  const res = await within(`the vendor's ${path}`, fetch(vendor.url + path));
  if (!res.ok) throw Object.assign(new Error(`vendor ${path}: HTTP ${res.status}`), { status: res.status, headers: res.headers });
  return res.json();
}

function clientFor(worker: string): Client {
  return new Client({ urls: daemon.url, workerId: worker, allowBudgetMs: 5000 });
}

const vendorCalls = () => vendor.hits.get("/refund") ?? 0;

test("Vercel AI SDK: a tripped tool leaves the next run's tools and the model reads the notice", async () => {
  const breakers = { refund_charge: `${prefix}:ai-payments`, web_search: `${prefix}:ai-search` };
  const tools = aiTools();
  const seen: { tools: string[]; system: string }[] = [];
  const model = () =>
    new MockLanguageModelV3({
      doGenerate: async (opts) => {
        const system = opts.prompt.find((m) => m.role === "system");
        seen.push({ tools: (opts.tools ?? []).map((t) => t.name), system: typeof system?.content === "string" ? system.content : "" });
        const names = (opts.tools ?? []).map((t) => t.name);
        const step = opts.prompt.some((m) => m.role === "tool");
        const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
        if (!step && names.includes("refund_charge")) {
          return { content: [{ type: "tool-call", toolCallId: "c1", toolName: "refund_charge", input: '{"charge_id":"ch_1"}' }], finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] };
        }
        return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
      },
    });
  const before = vendorCalls();
  for (const worker of ["ai-w1", "ai-w2"]) {
    const run = new Run(clientFor(worker));
    const result = await generateText({ model: model(), tools: await ai.toolsForRun(run, tools, { breakers }), system: run.notice(), prompt: "refund ch_1", stopWhen: stepCountIs(3) });
    const err = result.steps.flatMap((s) => s.content).find((p) => p.type === "tool-error");
    assert.ok(err, `${worker}: the vendor's failure reached the model as a tool error`);
  }
  assert.equal(vendorCalls() - before, 2);

  const run = new Run(clientFor("ai-w1"));
  const runTools = await ai.toolsForRun(run, tools, { breakers });
  console.log("ai: tools before the trip: web_search, refund_charge; after:", Object.keys(runTools).join(", "));
  assert.deepEqual(Object.keys(runTools), ["web_search"]);
  await generateText({ model: model(), tools: runTools, system: run.notice(), prompt: "refund ch_1" });
  const last = seen[seen.length - 1]!;
  assert.deepEqual(last.tools, ["web_search"]);
  assert.match(last.system, /^Some tools are out of service[\s\S]*- refund_charge: .*Instead you can use: issue_refund_manually\./);
  assert.equal(vendorCalls() - before, 2, "no call reached the vendor once the breaker was open");
});

test("Vercel AI SDK: a denial mid-run is the tool's result, the circuit_open JSON", async () => {
  const breakers = { refund_charge: `${prefix}:ai-payments` }; // tripped by the test above
  const run = new Run(clientFor("ai-w3"));
  const guarded = ai.guardTools(run, { refund_charge: aiTool({ inputSchema: jsonSchema<object>({ type: "object" }), execute: async () => callVendor("/refund") }) }, { breakers });
  const out = await guarded.refund_charge.execute!({}, { toolCallId: "c", messages: [] } as never);
  assert.equal(typeof out, "string");
  const denial = JSON.parse(out as string) as Record<string, unknown>;
  assert.equal(denial["status"], "circuit_open");
  assert.equal(denial["tool"], "refund_charge");
  assert.deepEqual(denial["alternatives"], ["issue_refund_manually"]);
  assert.equal(run.degraded[0]?.tool, "refund_charge");
});

test("OpenAI Agents SDK: guarded tool() options, filtered per run, with a scripted Model", async () => {
  const breakers = { refund_charge: `${prefix}:agents-payments`, web_search: `${prefix}:agents-search` };
  const parameters = { type: "object" as const, properties: {}, required: [], additionalProperties: false as const };
  const defs = [
    { name: "web_search", description: "Search the web.", parameters, strict: true as const, execute: async () => JSON.stringify(await callVendor("/search")) },
    { name: "refund_charge", description: "Refund a charge.", parameters, strict: true as const, execute: async () => JSON.stringify(await callVendor("/refund")) },
  ];
  const runner = new Runner({ tracingDisabled: true });
  const before = vendorCalls();
  for (const worker of ["ag-w1", "ag-w2"]) {
    const run = new Run(clientFor(worker));
    const model = new ScriptedModel();
    const agent = new Agent({ name: "support", instructions: "Help." + run.notice(), model, tools: (await agents.toolsForRun(run, defs, { breakers })).map((d) => agentTool(d)) });
    await runner.run(agent, "refund ch_1");
    assert.deepEqual(model.requests[0]!.tools.map((t) => t.name), ["web_search", "refund_charge"]);
  }
  assert.equal(vendorCalls() - before, 2);

  const run = new Run(clientFor("ag-w1"));
  const model = new ScriptedModel();
  const kept = await agents.toolsForRun(run, defs, { breakers });
  const agent = new Agent({ name: "support", instructions: "Help.\n" + run.notice(), model, tools: kept.map((d) => agentTool(d)) });
  const result = await runner.run(agent, "refund ch_1");
  assert.equal(result.finalOutput, "done");
  assert.deepEqual(model.requests[0]!.tools.map((t) => t.name), ["web_search"]);
  assert.match(model.requests[0]!.systemInstructions ?? "", /- refund_charge: /);
  assert.equal(vendorCalls() - before, 2);
});

test("plain tools arrays: the OpenAI and Anthropic SDKs' own loops, on a scripted API", async () => {
  const breakers = { refund_charge: `${prefix}:plain-payments` };
  const openaiTools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
    { type: "function", function: { name: "web_search", parameters: { type: "object", properties: {} } } },
    { type: "function", function: { name: "refund_charge", parameters: { type: "object", properties: {} } } },
  ];
  const anthropicTools: Anthropic.Tool[] = [
    { name: "web_search", input_schema: { type: "object", properties: {} } },
    { name: "refund_charge", input_schema: { type: "object", properties: {} } },
  ];
  const bodies: Record<string, unknown>[] = [];
  // The scripted API: each request's tools are recorded; it asks for refund_charge while offered.
  const api = await serve((req, res, body) => {
    const b = JSON.parse(body) as { tools?: { name?: string; function?: { name: string } }[] };
    bodies.push(b);
    const names = (b.tools ?? []).map((t) => t.function?.name ?? t.name);
    const call = names.includes("refund_charge");
    res.writeHead(200, { "content-type": "application/json" });
    if (req.url?.includes("/chat/completions")) {
      const message = call
        ? { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "refund_charge", arguments: "{}" } }] }
        : { role: "assistant", content: "done" };
      return res.end(JSON.stringify({ id: "x", object: "chat.completion", created: 0, model: "m", choices: [{ index: 0, message, finish_reason: call ? "tool_calls" : "stop" }] }));
    }
    const content = call ? [{ type: "tool_use", id: "c1", name: "refund_charge", input: {} }] : [{ type: "text", text: "done" }];
    res.end(JSON.stringify({ id: "x", type: "message", role: "assistant", model: "m", content, stop_reason: call ? "tool_use" : "end_turn", usage: { input_tokens: 1, output_tokens: 1 } }));
  });
  try {
    const oa = new OpenAI({ apiKey: "test", baseURL: api.url, maxRetries: 0 });
    const an = new Anthropic({ apiKey: "test", baseURL: api.url, maxRetries: 0 });
    const refund = () => callVendor("/refund");
    const before = vendorCalls();
    for (const [worker, sdk] of [["pl-w1", "openai"], ["pl-w2", "anthropic"]] as const) {
      const run = new Run(clientFor(worker));
      if (sdk === "openai") {
        const tools = await plain.toolsForRun(run, openaiTools, { breakers });
        const r = await oa.chat.completions.create({ model: "m", messages: [{ role: "user", content: "refund" }], tools });
        const call = r.choices[0]!.message.tool_calls![0]!;
        const name = call.type === "function" ? call.function.name : "";
        await assert.rejects(plain.runTool(run, name, refund, { breakers }), /HTTP 503/);
      } else {
        const tools = await plain.toolsForRun(run, anthropicTools, { breakers });
        const m = await an.messages.create({ model: "m", max_tokens: 10, messages: [{ role: "user", content: "refund" }], tools });
        const use = m.content.find((c) => c.type === "tool_use");
        await assert.rejects(plain.runTool(run, use!.type === "tool_use" ? use!.name : "", refund, { breakers }), /HTTP 503/);
      }
    }
    assert.equal(vendorCalls() - before, 2);
    const run = new Run(clientFor("pl-w1"));
    const tools = await plain.toolsForRun(run, openaiTools, { breakers });
    await oa.chat.completions.create({ model: "m", messages: [{ role: "system", content: run.notice() }, { role: "user", content: "refund" }], tools });
    const lastBody = bodies[bodies.length - 1] as { tools: { function: { name: string } }[]; messages: { content: string }[] };
    assert.deepEqual(lastBody.tools.map((t) => t.function.name), ["web_search"]);
    assert.match(lastBody.messages[0]!.content, /- refund_charge: /);
    const anTools = await plain.toolsForRun(new Run(clientFor("pl-w2")), anthropicTools, { breakers });
    assert.deepEqual(anTools.map(plain.toolName), ["web_search"]);
    // A call the model makes anyway gets the denial as its content.
    const content = await plain.runTool(run, "refund_charge", refund, { breakers });
    assert.equal((JSON.parse(content) as { status: string }).status, "circuit_open");
    assert.equal(vendorCalls() - before, 2);
  } finally {
    await api.close();
  }
});

const refunds = () => [...vendor.hits].reduce((n, [path, hits]) => n + (path.startsWith("/refund") ? hits : 0), 0);

/** failOnce records one failure of breaker from worker: half of the quorum's two workers. */
async function failOnce(worker: string, breaker: string): Promise<void> {
  await assert.rejects(clientFor(worker).guard(breaker, () => callVendor("/refund"), { tool: "refund_charge" }), /HTTP 503/);
}

function aiTools() {
  return {
    web_search: aiTool({ description: "Search the web.", inputSchema: jsonSchema<{ query: string }>({ type: "object", properties: { query: { type: "string" } } }), execute: () => callVendor("/search") }),
    refund_charge: aiTool({ description: "Refund a charge.", inputSchema: jsonSchema<{ charge_id: string }>({ type: "object", properties: { charge_id: { type: "string" } } }), execute: () => callVendor("/refund") }),
  };
}

/** Step is what the model was given at one step: its tools, its system prompt, and the tool outputs it read. */
interface Step {
  tools: string[];
  system: string;
  outputs: { type: string; value?: unknown }[];
}

/** stepOf reads a step's call options into a Step. */
function stepOf(opts: { tools?: { name: string }[] | undefined; prompt: { role: string; content: unknown }[] }): Step {
  const system = opts.prompt.find((m) => m.role === "system");
  const outputs = opts.prompt
    .filter((m) => m.role === "tool")
    .flatMap((m) => m.content as { type: string; output?: { type: string; value?: unknown } }[])
    .flatMap((p) => (p.type === "tool-result" && p.output ? [p.output] : []));
  return { tools: (opts.tools ?? []).map((t) => t.name), system: typeof system?.content === "string" ? system.content : "", outputs };
}

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };

/** The scripted model: it calls refund_charge while it is offered (a model that retries), else answers. */
function aiModel(steps: Step[]) {
  return new MockLanguageModelV3({
    doGenerate: async (opts) => {
      const s = stepOf(opts);
      steps.push(s);
      if (s.tools.includes("refund_charge")) {
        return { content: [{ type: "tool-call", toolCallId: `c${steps.length}`, toolName: "refund_charge", input: '{"charge_id":"ch_1"}' }], finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] };
      }
      return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
    },
    doStream: async (opts) => {
      const s = stepOf(opts);
      steps.push(s);
      const finish = (unified: "tool-calls" | "stop") => ({ type: "finish" as const, finishReason: { unified, raw: undefined }, usage });
      const parts = s.tools.includes("refund_charge")
        ? [{ type: "tool-call" as const, toolCallId: `c${steps.length}`, toolName: "refund_charge", input: '{"charge_id":"ch_1"}' }, finish("tool-calls")]
        : [{ type: "text-start" as const, id: "t" }, { type: "text-delta" as const, id: "t", delta: "done" }, { type: "text-end" as const, id: "t" }, finish("stop")];
      return { stream: convertArrayToReadableStream([{ type: "stream-start" as const, warnings: [] }, ...parts]) };
    },
  });
}

/**
 * midRun checks one agent run whose own failed call trips the fleet's
 * breaker (another worker failed first): the next step's tools lack the
 * tool and its system prompt carries the notice after the base prompt;
 * the failure reached the model as the shared failure text; the vendor
 * saw no call after the trip.
 */
async function midRun(kind: "generate" | "stream"): Promise<void> {
  const breakers = { refund_charge: `${prefix}:${kind}-payments`, web_search: `${prefix}:${kind}-search` };
  await failOnce(`${kind}-w2`, breakers.refund_charge);
  const before = refunds();
  const run = new Run(clientFor(`${kind}-w1`));
  const tools = aiTools();
  const steps: Step[] = [];
  const settings = { model: aiModel(steps), tools: guardTools(run, tools, { breakers }), prepareStep: prepareStep(run, tools, { breakers, system: "Help the customer." }), prompt: "refund ch_1", stopWhen: stepCountIs(4) };
  const text = kind === "generate" ? (await generateText(settings)).text : await streamText(settings).text;
  assert.equal(text, "done");
  assert.deepEqual(steps.map((s) => s.tools), [["web_search", "refund_charge"], ["web_search"]], "the tool left the remaining steps");
  assert.equal(steps[0]!.system, "Help the customer.");
  assert.match(steps[1]!.system, /^Help the customer\.\n\nSome tools are out of service[\s\S]*\n- refund_charge: it is failing: .*Instead you can use: issue_refund_manually\./);
  assert.deepEqual(steps[1]!.outputs, [{ type: "error-text", value: renderToolFailure("refund_charge") }], "the model read the shared failure text");
  assert.equal(refunds() - before, 1, "one call reached the vendor: the run's first");
  assert.deepEqual(run.degraded.map((u) => u.tool), ["refund_charge"]);
}

test("Vercel AI SDK: a circuit that opens between the steps of one generateText takes the tool out of the remaining steps", () => midRun("generate"));

test("Vercel AI SDK: the same within one streamText", () => midRun("stream"));

test("Vercel AI SDK: a failure is a ToolFailedError carrying the tool's error; an excluded error is not", async () => {
  const breaker = `${prefix}:ai-failure`;
  const run = new Run(clientFor("fail-w1"));
  const invalid = new RangeError("charge_id must start with ch_");
  const guarded = guardTools(
    run,
    {
      refund_charge: aiTool({ inputSchema: jsonSchema<object>({ type: "object" }), execute: () => callVendor("/refund") }),
      lookup: aiTool({ inputSchema: jsonSchema<object>({ type: "object" }), execute: async (): Promise<string> => { throw invalid; } }),
    },
    { breakers: { refund_charge: breaker }, exclude: (e) => e instanceof RangeError },
  );
  const call = (name: "refund_charge" | "lookup") => Promise.resolve(guarded[name].execute!({}, { toolCallId: "c", messages: [] } as never)).then(() => undefined, (e: unknown) => e);
  const err = await call("refund_charge");
  assert.ok(err instanceof ToolFailedError);
  assert.equal(err.message, renderToolFailure("refund_charge"));
  assert.match(String((err.cause as Error).message), /HTTP 503/);
  assert.equal(await call("lookup"), invalid, "an excluded error reaches the SDK as it is");
});

/** AgentsModel is a Model of the Agents SDK that calls refund_charge while it is offered, then answers; it keeps every request. */
class AgentsModel implements Model {
  readonly requests: ModelRequest[] = [];
  async getResponse(req: ModelRequest): Promise<ModelResponse> {
    this.requests.push(req);
    if (req.tools.some((t) => t.name === "refund_charge")) {
      return { usage: new Usage(), output: [{ type: "function_call", callId: `c${this.requests.length}`, name: "refund_charge", arguments: '{"charge_id":"ch_1"}', status: "completed" }] };
    }
    return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }] };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("not scripted");
  }
}

/** outputs is the tool outputs a request gave the model, in order. */
function outputs(req: ModelRequest): string[] {
  if (!Array.isArray(req.input)) return [];
  return req.input.flatMap((i) => (i.type === "function_call_result" && typeof i.output === "object" && "text" in i.output ? [String(i.output.text)] : []));
}

test("OpenAI Agents SDK: guardedTool tools of two zod schemas; a failure reads as the shared text, a tripped tool leaves the next turns", async () => {
  const breaker = `${prefix}:guarded-payments`;
  await failOnce("ag-w2", breaker);
  const before = refunds();
  const run = new Run(clientFor("ag-w1"));
  const charges: string[] = [];
  const search = guardedTool(run, { name: "web_search", description: "Search the web.", parameters: z.object({ query: z.string() }), execute: async ({ query }) => JSON.stringify(await callVendor(`/search?q=${query}`)) });
  const refund = guardedTool(run, {
    name: "refund_charge",
    description: "Refund a charge.",
    parameters: z.object({ charge_id: z.string() }),
    breaker,
    execute: async ({ charge_id }) => (charges.push(charge_id), JSON.stringify(await callVendor(`/refund/${charge_id}`))),
  });
  const model = new AgentsModel();
  const agent = new Agent({ name: "support", instructions: () => ["Help the customer.", run.notice()].filter(Boolean).join("\n\n"), model, tools: [search, refund] });
  const result = await new Runner({ tracingDisabled: true }).run(agent, "refund ch_1", { maxTurns: 5 });
  assert.equal(result.finalOutput, "done");
  const r = model.requests;
  assert.deepEqual(r.map((q) => q.tools.map((t) => t.name)), [["web_search", "refund_charge"], ["web_search"]], "the tool left the turns after the trip");
  assert.equal(outputs(r[1]!)[0], renderToolFailure("refund_charge"), "the failure: the shared text, not the SDK's 'Please try again'");
  assert.equal(r[0]!.systemInstructions, "Help the customer.");
  assert.match(r[1]!.systemInstructions ?? "", /^Help the customer\.\n\nSome tools are out of service[\s\S]*\n- refund_charge: it is failing: /);
  assert.deepEqual(charges, ["ch_1"], "execute was given the zod-parsed input, once");
  assert.equal(refunds() - before, 1);
});

test("OpenAI Agents SDK: a tool whose breaker denies is disabled from the first turn, a call made anyway reads the denial", async () => {
  const breaker = `${prefix}:agents-before`;
  await failOnce("pre-w1", breaker);
  await failOnce("pre-w2", breaker);
  const before = refunds();
  const run = new Run(clientFor("pre-w1"));
  const refund = guardedTool(run, { name: "refund_charge", description: "Refund a charge.", parameters: z.object({ charge_id: z.string() }), breaker, execute: async () => JSON.stringify(await callVendor("/refund")) });
  const model = new AgentsModel();
  const agent = new Agent({ name: "support", instructions: () => run.notice(), model, tools: [refund] });
  await new Runner({ tracingDisabled: true }).run(agent, "refund ch_1");
  assert.deepEqual(model.requests.map((q) => q.tools.map((t) => t.name)), [[]]);
  assert.match(model.requests[0]!.systemInstructions ?? "", /^Some tools are out of service[\s\S]*- refund_charge: /);
  const denial = JSON.parse(String(await refund.invoke(new RunContext(), '{"charge_id":"ch_1"}'))) as { status: string };
  assert.equal(denial.status, "circuit_open", "a call the model makes anyway: the denial, as the tool's output");
  assert.equal(refunds() - before, 0);
});

// Traced: the application registered OpenTelemetry (an in-memory
// exporter), and a second daemon exports its spans over OTLP to a
// receiver of the test's own. One denied tool call inside a framework's
// run: the tool's span carries the decision, and the daemon's Allow span
// is its child, in its trace.

let traced: { daemon: Daemon; sink: Sink } | undefined;

/** tracedDaemon starts, once, a daemon exporting to an otlpsink. */
async function tracedDaemon(): Promise<{ daemon: Daemon; sink: Sink }> {
  if (!traced) {
    const sink = await startSink();
    traced = { sink, daemon: await startDaemon({ policy, env: sink.env }) };
  }
  return traced;
}

/** withTracedTrip trips the breaker `traced-<id>` (a failure from each of two workers), then runs fn with the application's tracing registered and a third worker to call through the traced daemon; no refund reaches the vendor. */
async function withTracedTrip(id: string, fn: (t: { url: string; worker: string; breaker: string; sink: Sink; tracing: Tracing }) => Promise<void>): Promise<void> {
  const { daemon: d, sink } = await tracedDaemon();
  const breaker = `${prefix}:traced-${id}`;
  await failOnce(`${id}-w1`, breaker);
  await failOnce(`${id}-w2`, breaker);
  const before = refunds();
  const tracing = registerTracing();
  try {
    await fn({ url: d.url, worker: `${id}-w3`, breaker, sink, tracing });
  } finally {
    tracing.disable();
  }
  assert.equal(refunds() - before, 0);
}

/** deniedTool checks the span named name of a tool call the tripped breaker denied, and the daemon's Allow span under it. */
async function deniedTool(spans: ReadableSpan[], name: string, breaker: string, sink: Sink): Promise<void> {
  const tool = spans.filter((s) => s.name === name);
  assert.equal(tool.length, 1, `one ${name} span among ${spans.map((s) => s.name).join(", ")}`);
  const a = tool[0]!.attributes;
  assert.equal(a["breakerd.breaker"], breaker);
  assert.equal(a["breakerd.decision"], "denied_open");
  assert.equal(a["breakerd.denial.status"], "circuit_open");
  assert.equal(a["breakerd.degraded"], false);
  const parent = tool[0]!.spanContext();
  const allow = await sink.spanUnder(parent, "POST /breakerd.v1.BreakerService/Allow");
  console.log(`traced: ${name} ${parent.spanId} (breakerd.decision=${String(a["breakerd.decision"])}) -> ${allow.service}: ${allow.name} ${allow.span_id}, trace ${allow.trace_id}`);
  assert.equal(allow.trace_id, parent.traceId);
}

/** aiTelemetry is a generateText's telemetry for the installed ai (called once the application's tracing is registered): ai 7 traces through @ai-sdk/otel, whose tool span is execute_tool; ai 6 through its own, ai.toolCall. */
async function aiTelemetry(): Promise<{ telemetry: Record<string, unknown>; toolSpan: string }> {
  const require = createRequire(import.meta.url);
  const major = Number((require("ai/package.json") as { version: string }).version.split(".")[0]);
  if (major < 7) return { telemetry: { isEnabled: true }, toolSpan: "ai.toolCall" };
  const integration = "@ai-sdk/otel"; // installed beside ai 7 (scripts/test.sh frameworks-latest)
  const { OpenTelemetry } = (await import(integration)) as { OpenTelemetry: new (o: { tracer: Tracer }) => unknown };
  // its tracer given: its own copy of @opentelemetry/api would otherwise hold a proxy no provider reaches
  return { telemetry: { isEnabled: true, integrations: [new OpenTelemetry({ tracer: trace.getTracer("ai") })] }, toolSpan: "execute_tool refund_charge" };
}

test("Vercel AI SDK, traced: a denied tool call's span carries the decision, the daemon's Allow span its child", async () => {
  await withTracedTrip("ai", async ({ url, worker, breaker, sink, tracing }) => {
    const { telemetry, toolSpan } = await aiTelemetry();
    const run = new Run(new Client({ urls: url, workerId: worker, allowBudgetMs: 5000 }));
    const steps: Step[] = [];
    const tools = guardTools(run, aiTools(), { breakers: { refund_charge: breaker } });
    const result = await generateText({
      model: aiModel(steps), tools, prompt: "refund ch_1", stopWhen: stepCountIs(1),
      experimental_telemetry: telemetry as Parameters<typeof generateText>[0]["experimental_telemetry"],
    });
    const out = result.steps[0]?.toolResults[0]?.output;
    assert.equal((JSON.parse(String(out)) as { status: string }).status, "circuit_open", "the model read the denial");
    await deniedTool(tracing.exporter.getFinishedSpans(), toolSpan, breaker, sink);
  });
});

test("OpenAI Agents SDK, traced: a denied tool call's execute_tool span carries the decision, the daemon's Allow span its child", async () => {
  await withTracedTrip("agents", async ({ url, worker, breaker, sink, tracing }) => {
    const run = new Run(new Client({ urls: url, workerId: worker, allowBudgetMs: 5000 }));
    const parameters = { type: "object" as const, properties: {}, required: [], additionalProperties: false as const };
    const defs = [{ name: "refund_charge", description: "Refund a charge.", parameters, strict: true as const, execute: async () => JSON.stringify(await callVendor("/refund")) }];
    const model = new ScriptedModel();
    const agent = new Agent({ name: "support", instructions: "Help.", model, tools: guardToolOptions(run, defs, { breakers: { refund_charge: breaker } }).map((o) => agentTool(o)) });
    await trace.getTracer("app").startActiveSpan("invoke_agent support", async (span) => {
      await new Runner({ tracingDisabled: true }).run(agent, "refund ch_1");
      span.end();
    });
    assert.deepEqual(outputs(model.requests[1]!).map((o) => (JSON.parse(o) as { status: string }).status), ["circuit_open"], "the model read the denial");
    const spans = tracing.exporter.getFinishedSpans();
    await deniedTool(spans, "execute_tool refund_charge", breaker, sink);
    const tool = spans.find((s) => s.name === "execute_tool refund_charge")!;
    const agentSpan = spans.find((s) => s.name === "invoke_agent support")!;
    assert.equal(tool.parentSpanContext?.spanId, agentSpan.spanContext().spanId, "the tool's span is the run's child");
    assert.equal(tool.attributes["gen_ai.operation.name"], "execute_tool");
    assert.equal(tool.attributes["gen_ai.tool.name"], "refund_charge");
  });
});
