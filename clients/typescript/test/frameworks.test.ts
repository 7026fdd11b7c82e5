// The adapters inside the real frameworks, within one agent run: a
// circuit that opens between the steps of one generateText or streamText
// takes the tool out of the remaining steps (prepareStep), and of an
// @openai/agents run's remaining turns (guardedTool), and a failed
// call reaches the model as the shared failure text rather than the
// framework's invitation to try again. The models are the frameworks'
// own mocks (ai/test, a Model of the Agents SDK); the vendor is a server
// of the test's own that counts its requests.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Agent, Runner, RunContext, setTracingDisabled, type Model, type ModelRequest, type ModelResponse, Usage } from "@openai/agents";
import { generateText, jsonSchema, stepCountIs, streamText, tool } from "ai";
import { convertArrayToReadableStream, MockLanguageModelV3 } from "ai/test";
import { z } from "zod";

import { Client, renderToolFailure, Run } from "../src/index.js";
import { guardTools, prepareStep, ToolFailedError } from "../src/adapters/ai.js";
import { guardedTool } from "../src/adapters/openai-agents.js";
import { startDaemon, uniq, type Daemon } from "./daemon.js";
import { serve, type Served } from "./helpers.js";

let daemon: Daemon;
let vendor: Served;
const prefix = uniq();

before(async () => {
  setTracingDisabled(true);
  daemon = await startDaemon({
    policy: `breakers:\n  - match: "${prefix}*"\n    threshold: 2\n    min_workers: 2\n    cooldown_base: 10m\n    alternatives: [issue_refund_manually]\n`,
  });
  vendor = await serve((req, res) => {
    const down = req.url?.startsWith("/refund");
    res.writeHead(down ? 503 : 200, { "content-type": "application/json" });
    res.end(down ? '{"error":{"code":"upstream_down"}}' : '{"results":["a"]}');
  });
});
after(async () => {
  await daemon?.stop();
  await vendor?.close();
});

async function callVendor(path: string): Promise<unknown> {
  const res = await fetch(vendor.url + path);
  if (!res.ok) throw Object.assign(new Error(`vendor ${path}: HTTP ${res.status}`), { status: res.status, headers: res.headers });
  return res.json();
}

const clientFor = (worker: string) => new Client({ urls: daemon.url, workerId: worker, allowBudgetMs: 5000, onError: () => {} });
const refunds = () => [...vendor.hits].reduce((n, [path, hits]) => n + (path.startsWith("/refund") ? hits : 0), 0);

/** failOnce records one failure of breaker from worker: half of the quorum's two workers. */
async function failOnce(worker: string, breaker: string): Promise<void> {
  await assert.rejects(clientFor(worker).guard(breaker, () => callVendor("/refund"), { tool: "refund_charge" }), /HTTP 503/);
}

function aiTools() {
  return {
    web_search: tool({ description: "Search the web.", inputSchema: jsonSchema<{ query: string }>({ type: "object", properties: { query: { type: "string" } } }), execute: () => callVendor("/search") }),
    refund_charge: tool({ description: "Refund a charge.", inputSchema: jsonSchema<{ charge_id: string }>({ type: "object", properties: { charge_id: { type: "string" } } }), execute: () => callVendor("/refund") }),
  };
}

/** Step is what the model was given at one step: its tools, its system prompt, and the tool outputs it read. */
interface Step {
  tools: string[];
  system: string;
  outputs: { type: string; value?: unknown }[];
}

/** seen reads a step's call options into a Step. */
function seen(opts: { tools?: { name: string }[] | undefined; prompt: { role: string; content: unknown }[] }): Step {
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
      const s = seen(opts);
      steps.push(s);
      if (s.tools.includes("refund_charge")) {
        return { content: [{ type: "tool-call", toolCallId: `c${steps.length}`, toolName: "refund_charge", input: '{"charge_id":"ch_1"}' }], finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] };
      }
      return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
    },
    doStream: async (opts) => {
      const s = seen(opts);
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
      refund_charge: tool({ inputSchema: jsonSchema<object>({ type: "object" }), execute: () => callVendor("/refund") }),
      lookup: tool({ inputSchema: jsonSchema<object>({ type: "object" }), execute: async (): Promise<string> => { throw invalid; } }),
    },
    { breakers: { refund_charge: breaker }, exclude: (e) => e instanceof RangeError },
  );
  const call = (name: "refund_charge" | "lookup") => Promise.resolve(guarded[name].execute!({}, { toolCallId: "c", messages: [] })).then(() => undefined, (e: unknown) => e);
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
  const breaker = `${prefix}:agents-payments`;
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
