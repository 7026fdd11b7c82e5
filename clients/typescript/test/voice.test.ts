// What the model reads when breakerd denies, inside the real frameworks
// (the AI SDK with its MockLanguageModelV3, @openai/agents with a
// scripted Model), against a real daemon: the run's notice and the tool
// results, the run's memory included, are breakerd's denial rendered
// through the shared templates with the tool's name, for a suspect
// worker, a probe in flight and a forced breaker. The vendor is a server
// of the test's own that counts its calls.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Agent, Runner, setTracingDisabled, tool as agentTool } from "@openai/agents";
import { generateText, jsonSchema, stepCountIs, tool as aiTool } from "ai";
import { MockLanguageModelV3 } from "ai/test";

import { Client, Run } from "../src/index.js";
import * as ai from "../src/adapters/ai.js";
import * as agents from "../src/adapters/openai-agents.js";
import { startDaemon, uniq, type Daemon } from "./daemon.js";
import { serve, waitFor, within, type Served } from "./helpers.js";
import { ScriptedModel } from "./scripted.js";

let daemon: Daemon;
let vendor: Served;
const prefix = uniq();

before(async () => {
  setTracingDisabled(true);
  daemon = await startDaemon({
    policy: `breakers:
  - match: "${prefix}:probe*"
    threshold: 1
    min_workers: 1
    cooldown_base: 1ms
    probe_timeout: 10m
  - match: "${prefix}*"
    threshold: 2
    min_workers: 2
    cooldown_base: 10m
    alternatives: [issue_refund_manually]
`,
  });
  vendor = await serve((req, res) => {
    res.writeHead(req.url?.startsWith("/refund") ? 503 : 200, { "content-type": "application/json" });
    res.end(req.url?.startsWith("/refund") ? '{"error":{"code":"upstream_down"}}' : '{"results":["a"]}');
  });
});
after(async () => {
  await daemon?.stop();
  await vendor?.close();
});

const clientFor = (worker: string) => new Client({ urls: daemon.url, workerId: worker, allowBudgetMs: 5000 });
const refundCalls = () => vendor.hits.get("/refund") ?? 0;
/** callVendor throws what fetch-based SDKs throw for a failed answer: an error with its status and headers. */
async function callVendor(path: string): Promise<unknown> {
  const res = await within(`the vendor's ${path}`, fetch(vendor.url + path));
  if (!res.ok) throw Object.assign(new Error(`vendor ${path}: HTTP ${res.status}`), { status: res.status, headers: res.headers });
  return res.json();
}
const refund = () => callVendor("/refund");
const search = () => callVendor("/search");

/** force pins breaker open (no end) with the operator's reason. */
async function force(breaker: string, reason: string): Promise<void> {
  const res = await within("the daemon's Force", fetch(`${daemon.url}/breakerd.v1.BreakerService/Force`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ breaker, mode: "FORCE_MODE_OPEN", reason, operator: "test" }),
  }));
  assert.equal(res.status, 200, await res.text());
}

/** noticeLine is the notice's line for tool. */
function noticeLine(notice: string, tool: string): string {
  const line = notice.split("\n").find((l) => l.startsWith(`- ${tool}: `));
  assert.ok(line, `the notice names ${tool}:\n${notice}`);
  return line;
}

/** clean: text the model reads names no breaker and no worker. */
function clean(text: string, ...secrets: string[]): void {
  for (const s of [prefix, ...secrets]) assert.ok(!text.includes(s), `the model read ${JSON.stringify(s)}: ${text}`);
}

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };

/** aiModel calls refund_charge `calls` times (one step each) while offered, then answers; it keeps what it was given. */
function aiModel(calls: number, seen: { system: string; tools: string[]; results: string[] }) {
  return new MockLanguageModelV3({
    doGenerate: async (opts) => {
      const system = opts.prompt.find((m) => m.role === "system");
      seen.system = typeof system?.content === "string" ? system.content : "";
      seen.tools = (opts.tools ?? []).map((t) => t.name);
      seen.results = opts.prompt.flatMap((m) => (m.role === "tool" ? m.content : [])).map((p) => JSON.stringify(p));
      const made = opts.prompt.filter((m) => m.role === "tool").length;
      if (made < calls && seen.tools.includes("refund_charge")) {
        return { content: [{ type: "tool-call", toolCallId: `c${made}`, toolName: "refund_charge", input: "{}" }], finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] };
      }
      return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
    },
  });
}

function aiTools() {
  const schema = jsonSchema<object>({ type: "object", properties: {} });
  return {
    web_search: aiTool({ description: "Search the web.", inputSchema: schema, execute: search }),
    refund_charge: aiTool({ description: "Refund a charge.", inputSchema: schema, execute: refund }),
  };
}

/** toolOutputs are the outputs of refund_charge's calls in a generateText result, as the model got them. */
function toolOutputs(result: { steps: { content: readonly { type: string; toolName?: string; output?: unknown }[] }[] }): string[] {
  return result.steps.flatMap((s) => s.content).flatMap((p) => (p.type === "tool-result" && p.toolName === "refund_charge" ? [String(p.output)] : []));
}

test("Vercel AI SDK: a suspect worker's run reads its own denial: a reason, worker_isolated, and no fleet outage", async () => {
  const breakers = { refund_charge: `${prefix}:suspect-payments`, web_search: `${prefix}:suspect-search` };
  const seen = { system: "", tools: [] as string[], results: [] as string[] };
  const before = refundCalls();
  // One worker alone fails past the threshold: it is the suspect, the fleet is not denied.
  for (let i = 0; i < 2; i++) {
    const run = new Run(clientFor("ai-suspect-1"));
    await generateText({ model: aiModel(1, seen), tools: await ai.toolsForRun(run, aiTools(), { breakers }), system: run.notice(), prompt: "refund", stopWhen: stepCountIs(3) });
  }
  assert.equal(refundCalls() - before, 2);

  const run = new Run(clientFor("ai-suspect-1"));
  const tools = await ai.toolsForRun(run, aiTools(), { breakers });
  await generateText({ model: aiModel(1, seen), tools, system: run.notice(), prompt: "refund", stopWhen: stepCountIs(3) });
  assert.deepEqual(seen.tools, ["web_search"], "the suspect's run lost the tool");
  const line = noticeLine(seen.system, "refund_charge");
  assert.doesNotMatch(line, /^- refund_charge: *\./, "the notice gives a reason");
  clean(seen.system, "ai-suspect-1");

  // Mid-run calls by the suspect, the second from the run's memory: the
  // tool results say it is this worker's denial, not an open circuit.
  const mid = new Run(clientFor("ai-suspect-1"));
  const result = await generateText({ model: aiModel(2, seen), tools: ai.guardTools(mid, aiTools(), { breakers }), prompt: "refund", stopWhen: stepCountIs(4) });
  const outs = toolOutputs(result);
  assert.equal(outs.length, 2, "both denials reached the model as the tool's result");
  for (const out of outs) {
    const r = JSON.parse(out) as Record<string, unknown>;
    assert.equal(r["status"], "worker_isolated", out);
    assert.equal(r["scope"], "worker", out);
    clean(out, "ai-suspect-1");
  }
  const [first, second] = outs.map((o) => JSON.parse(o) as Record<string, number>);
  assert.ok(second!["may_return_in_ms"]! <= first!["may_return_in_ms"]!, "the run's memory counts the wait down from breakerd's clock");
  assert.deepEqual({ ...second, may_return_in_ms: 0 }, { ...first, may_return_in_ms: 0 }, "the run's memory answers as breakerd did");

  const denial = run.degraded[0]!.denial;
  assert.equal(denial.status, "worker_isolated");
  assert.equal(denial.scope, "worker");
  assert.ok(denial.reason.length > 0 && line.includes(denial.reason.replace(/[. ]+$/, "")), line);

  // Another worker keeps the tool: the fleet is not denied.
  const other = new Run(clientFor("ai-suspect-2"));
  assert.deepEqual(Object.keys(await ai.toolsForRun(other, aiTools(), { breakers })), ["web_search", "refund_charge"]);
  assert.equal(refundCalls() - before, 2, "no call of the suspect's reached the vendor once it was denied");
});

test("Vercel AI SDK: a forced breaker's denial reads the same when the run's memory answers it", async () => {
  const breaker = `${prefix}:forced-payments`;
  await force(breaker, "maintenance window");
  const run = new Run(clientFor("ai-forced-1"));
  const before = refundCalls();
  const result = await generateText({
    model: aiModel(2, { system: "", tools: [], results: [] }),
    tools: ai.guardTools(run, aiTools(), { breakers: { refund_charge: breaker } }),
    prompt: "refund",
    stopWhen: stepCountIs(4),
  });
  const outs = toolOutputs(result);
  assert.equal(outs.length, 2, "two calls, two denials");
  assert.equal(refundCalls() - before, 0);
  const [first, second] = outs.map((o) => JSON.parse(o) as Record<string, unknown>);
  assert.equal(first!["forced"], true);
  assert.deepEqual(second, first, "the run's memory answers with breakerd's words and flags");
  assert.equal(outs[1], outs[0]);
  clean(outs.join("\n"), "ai-forced-1");
  assert.equal(run.degraded[0]!.denial.forced, true);
  assert.match(run.notice(), /- refund_charge: /);
});

/** outputsOf are the function call results the model was given, in order. */
function outputsOf(model: ScriptedModel): string[] {
  const last = model.requests[model.requests.length - 1]!;
  const items = Array.isArray(last.input) ? last.input : [];
  return items.flatMap((i) => {
    if (i.type !== "function_call_result") return [];
    const o = i.output as unknown;
    return [typeof o === "string" ? o : typeof (o as { text?: unknown })?.text === "string" ? (o as { text: string }).text : JSON.stringify(o)];
  });
}

test("OpenAI Agents SDK: a probe in flight neither invites a retry nor gives the lease as a wait", async () => {
  const breaker = `${prefix}:probe-payments`;
  const parameters = { type: "object" as const, properties: {}, required: [], additionalProperties: false as const };
  const defs = [
    { name: "web_search", description: "Search the web.", parameters, strict: true as const, execute: async () => JSON.stringify(await search()) },
    { name: "refund_charge", description: "Refund a charge.", parameters, strict: true as const, execute: async () => JSON.stringify(await refund()) },
  ];
  const breakers = { refund_charge: breaker, web_search: `${prefix}:probe-search-ok` };
  // One failure trips it (threshold 1); after its 1 ms cooldown one
  // worker takes the probe and holds its 10-minute lease.
  const holder = clientFor("ag-probe-holder");
  await assert.rejects(holder.guard(breaker, refund));
  await waitFor(async () => (await holder.allow(breaker)).decision === "DECISION_PROBE", "the probe's lease");

  const runner = new Runner({ tracingDisabled: true });
  const run = new Run(clientFor("ag-probe-1"));
  const model = new ScriptedModel();
  const kept = await agents.toolsForRun(run, defs, { breakers });
  await runner.run(new Agent({ name: "support", instructions: "Help.\n" + run.notice(), model, tools: kept.map((d) => agentTool(d)) }), "refund");
  assert.deepEqual(model.requests[0]!.tools.map((t) => t.name), ["web_search"]);
  const notice = model.requests[0]!.systemInstructions ?? "";
  const line = noticeLine(notice, "refund_charge");
  assert.doesNotMatch(line, /back in about|ask again|try again|retry/i, "no wait and no retry offered to a run that will not take the tool back");
  clean(notice, "ag-probe-1", "ag-probe-holder");
  const denial = run.degraded[0]!.denial;
  assert.equal(denial.status, "probe_in_flight");
  assert.equal(denial.mayReturnAtMs, 0, "a lease is no wait");
  assert.ok(line.includes(denial.reason.replace(/[. ]+$/, "")), line);

  // Calls the model makes anyway, the second from the run's memory.
  const mid = new Run(clientFor("ag-probe-2"));
  const model2 = new ScriptedModel(2);
  const guarded = agents.guardToolOptions(mid, defs, { breakers });
  await runner.run(new Agent({ name: "support", instructions: "Help.", model: model2, tools: guarded.map((d) => agentTool(d)) }), "refund");
  const outs = outputsOf(model2);
  assert.equal(outs.length, 2, outs.join("\n"));
  for (const o of outs) {
    const r = JSON.parse(o) as Record<string, unknown>;
    assert.equal(r["status"], "probe_in_flight", o);
    for (const [k, v] of Object.entries(r)) if (/retry|wait|back/.test(k)) assert.ok(!v, `${k}: ${String(v)} in ${o}`);
    clean(o, "ag-probe-2", "ag-probe-holder");
  }
  assert.equal(outs[1], outs[0], "the run's memory answers as breakerd did");
});
