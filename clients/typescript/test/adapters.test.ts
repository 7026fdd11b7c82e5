// The framework adapters inside the real frameworks, with scripted models
// and no network: a vendor outage seen by two workers trips the fleet's
// breaker on a real daemon, and the next run's tools lack the tool while
// the model reads the notice. The vendor is a server of the test's own
// that counts its requests (no call reaches it once the breaker is open).

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Agent, Runner, setTracingDisabled, tool as agentTool } from "@openai/agents";
import Anthropic from "@anthropic-ai/sdk";
import { generateText, jsonSchema, stepCountIs, tool as aiTool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import OpenAI from "openai";

import { Client, Run } from "../src/index.js";
import * as ai from "../src/adapters/ai.js";
import * as agents from "../src/adapters/openai-agents.js";
import * as plain from "../src/adapters/tools.js";
import { startDaemon, uniq, type Daemon } from "./daemon.js";
import { serve, type Served } from "./helpers.js";
import { ScriptedModel } from "./scripted.js";

let daemon: Daemon;
let vendor: Served;
const prefix = uniq();

before(async () => {
  setTracingDisabled(true);
  daemon = await startDaemon({
    policy: `breakers:\n  - match: "${prefix}*"\n    threshold: 2\n    min_workers: 2\n    cooldown_base: 10m\n    alternatives: [issue_refund_manually]\n`,
  });
  vendor = await serve((req, res) => {
    res.writeHead(req.url?.startsWith("/refund") ? 503 : 200, { "content-type": "application/json", "retry-after": "120" });
    res.end(req.url?.startsWith("/refund") ? '{"error":{"code":"upstream_down"}}' : '{"results":["a"]}');
  });
});
after(async () => {
  await daemon?.stop();
  await vendor?.close();
});

/** A vendor call that throws what fetch-based SDKs throw for a failed answer: an error with status and headers. */
async function callVendor(path: string): Promise<unknown> {
  const res = await fetch(vendor.url + path);
  if (!res.ok) throw Object.assign(new Error(`vendor ${path}: HTTP ${res.status}`), { status: res.status, headers: res.headers });
  return res.json();
}

function clientFor(worker: string): Client {
  return new Client({ urls: daemon.url, workerId: worker, allowBudgetMs: 5000 });
}

const vendorCalls = () => vendor.hits.get("/refund") ?? 0;

test("Vercel AI SDK: a tripped tool leaves the next run's tools and the model reads the notice", async () => {
  const breakers = { refund_charge: `${prefix}:ai-payments`, web_search: `${prefix}:ai-search` };
  const tools = {
    web_search: aiTool({ description: "Search the web.", inputSchema: jsonSchema<{ query: string }>({ type: "object", properties: { query: { type: "string" } } }), execute: async () => callVendor("/search") }),
    refund_charge: aiTool({ description: "Refund a charge.", inputSchema: jsonSchema<{ charge_id: string }>({ type: "object", properties: { charge_id: { type: "string" } } }), execute: async () => callVendor("/refund") }),
  };
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
  const out = await guarded.refund_charge.execute!({}, { toolCallId: "c", messages: [] });
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
