// The framework adapters when no daemon answers, inside the real
// frameworks with scripted models (ai/test's mock, a Model of the Agents
// SDK, the OpenAI SDK on a scripted API) and no network: the tool fails
// one short of the local fallback's trip, then, while the model thinks,
// another of this worker's calls to the same dependency fails and the
// fallback opens on its own. The call the model then makes is denied
// with "degraded": true in its tool result
// (conformance/templates/tool_result.tmpl), the next step no longer has
// the tool, and the notice the model reads says the worker judged alone
// (conformance/templates/notice.tmpl). The vendor counts its calls: the
// denied call never reaches it.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { before, test } from "node:test";

import { Agent, Runner, setTracingDisabled, Usage, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import { generateText, jsonSchema, stepCountIs, tool as aiTool } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import OpenAI from "openai";
import { z } from "zod";

import { Client, Run } from "../src/index.js";
import { guardTools, prepareStep } from "../src/adapters/ai.js";
import { guardedTool } from "../src/adapters/openai-agents.js";
import * as plain from "../src/adapters/tools.js";
import { DEFAULT_LOCAL_POLICY } from "../src/fallback.js";
import { conformanceDir, DEAD_URL, serve } from "./helpers.js";

/** The failures the local fallback trips on, for a breaker whose policy it never read (no daemon gave one). */
const THRESHOLD = DEFAULT_LOCAL_POLICY.threshold;
const breakers = { refund_charge: "payments" };

before(() => setTracingDisabled(true));

/** degradedSentence is the notice's words for a tool this worker judged alone: the template's degraded section. */
function degradedSentence(): string {
  const tmpl = readFileSync(`${conformanceDir()}/templates/notice.tmpl`, "utf8");
  const m = /\{\{#degraded\}\}(.*?)\{\{\/degraded\}\}/s.exec(tmpl);
  assert.ok(m, "notice.tmpl has a degraded section");
  return m[1]!.trim();
}

/** Vendor is the payments vendor, down: every refund throws a 503 as fetch-based SDKs do. It counts its calls. */
class Vendor {
  calls = 0;
  refund(): Promise<string> {
    this.calls++;
    return Promise.reject(Object.assign(new Error("vendor /refund: HTTP 503"), { status: 503, headers: new Headers() }));
  }
}

/** withDeadClient runs fn with a client no daemon answers, closed after. */
async function withDeadClient(fn: (c: Client) => Promise<void>): Promise<void> {
  const c = new Client({ urls: DEAD_URL, workerId: "w1", savingsIntervalMs: 0, onError: () => undefined });
  try {
    await fn(c);
  } finally {
    await c.close();
  }
}

/** failElsewhere is another of this worker's calls to payments, failing: the one that trips the fallback. */
async function failElsewhere(c: Client, vendor: Vendor): Promise<void> {
  await assert.rejects(c.guard("payments", () => vendor.refund()), /HTTP 503/);
}

/** judgedAlone checks a tool result the model read: the fallback's denial of refund_charge, marked degraded. */
function judgedAlone(text: string): void {
  const r = JSON.parse(text) as Record<string, unknown>;
  assert.equal(r["status"], "circuit_open");
  assert.equal(r["tool"], "refund_charge");
  assert.equal(r["degraded"], true, `the tool result says the worker judged alone: ${text}`);
}

test("Vercel AI SDK, no daemon: the fallback's denial reads degraded, and the next step's system prompt says the worker judged alone", async () => {
  await withDeadClient(async (c) => {
    const vendor = new Vendor();
    const run = new Run(c);
    const tools = {
      web_search: aiTool({ inputSchema: jsonSchema<object>({ type: "object" }), execute: async () => "results" }),
      refund_charge: aiTool({ inputSchema: jsonSchema<object>({ type: "object" }), execute: () => vendor.refund() }),
    };
    const seen: { tools: string[]; system: string; outputs: unknown[] }[] = [];
    const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
    const model = new MockLanguageModelV3({
      doGenerate: async (opts) => {
        const system = opts.prompt.find((m) => m.role === "system");
        const outputs = opts.prompt.filter((m) => m.role === "tool").flatMap((m) => m.content.flatMap((p) => (p.type === "tool-result" ? [p.output] : [])));
        const names = (opts.tools ?? []).map((t) => t.name);
        seen.push({ tools: names, system: typeof system?.content === "string" ? system.content : "", outputs });
        if (seen.length === THRESHOLD) await failElsewhere(c, vendor);
        if (!names.includes("refund_charge")) return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
        return { content: [{ type: "tool-call", toolCallId: `c${seen.length}`, toolName: "refund_charge", input: "{}" }], finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] };
      },
    });
    const result = await generateText({
      model,
      tools: guardTools(run, tools, { breakers }),
      prepareStep: prepareStep(run, tools, { breakers, system: "Help the customer." }),
      prompt: "refund ch_1",
      stopWhen: stepCountIs(THRESHOLD + 2),
    });
    assert.equal(result.text, "done");
    assert.equal(seen.length, THRESHOLD + 1);
    assert.deepEqual(seen.at(-1)!.tools, ["web_search"], "the tool left the step after the trip");
    assert.ok(seen.at(-1)!.system.includes("- refund_charge: ") && seen.at(-1)!.system.includes(degradedSentence()), seen.at(-1)!.system);
    const denied = seen.at(-1)!.outputs.at(-1) as { type: string; value: unknown };
    judgedAlone(typeof denied.value === "string" ? denied.value : JSON.stringify(denied.value));
    assert.equal(vendor.calls, THRESHOLD, "the denied call never reached the vendor");
  });
});

/** AgentsModel calls refund_charge while offered, then answers; on its THRESHOLD-th request another call trips the fallback first. */
class AgentsModel implements Model {
  readonly requests: ModelRequest[] = [];
  constructor(private readonly whileThinking: (n: number) => Promise<void>) {}
  async getResponse(req: ModelRequest): Promise<ModelResponse> {
    this.requests.push(req);
    await this.whileThinking(this.requests.length);
    if (req.tools.some((t) => t.name === "refund_charge")) {
      return { usage: new Usage(), output: [{ type: "function_call", callId: `c${this.requests.length}`, name: "refund_charge", arguments: "{}", status: "completed" }] };
    }
    return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }] };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("not scripted");
  }
}

test("OpenAI Agents SDK, no daemon: guardedTool's denial reads degraded, and the next turn's instructions say the worker judged alone", async () => {
  await withDeadClient(async (c) => {
    const vendor = new Vendor();
    const run = new Run(c);
    const search = guardedTool(run, { name: "web_search", description: "Search the web.", parameters: z.object({}), execute: async () => "results" });
    const refund = guardedTool(run, { name: "refund_charge", description: "Refund a charge.", parameters: z.object({}), breaker: "payments", execute: () => vendor.refund() });
    const model = new AgentsModel(async (n) => (n === THRESHOLD ? failElsewhere(c, vendor) : undefined));
    const agent = new Agent({ name: "support", instructions: () => ["Help the customer.", run.notice()].filter(Boolean).join("\n\n"), model, tools: [search, refund] });
    const result = await new Runner({ tracingDisabled: true }).run(agent, "refund ch_1", { maxTurns: THRESHOLD + 2 });
    assert.equal(result.finalOutput, "done");
    const last = model.requests.at(-1)!;
    assert.equal(model.requests.length, THRESHOLD + 1);
    assert.deepEqual(last.tools.map((t) => t.name), ["web_search"], "the tool left the turn after the trip");
    assert.ok((last.systemInstructions ?? "").includes("- refund_charge: ") && (last.systemInstructions ?? "").includes(degradedSentence()), last.systemInstructions);
    const outputs = Array.isArray(last.input)
      ? last.input.flatMap((i) => (i.type === "function_call_result" && typeof i.output === "object" && "text" in i.output ? [String(i.output.text)] : []))
      : [];
    judgedAlone(outputs.at(-1)!);
    assert.equal(vendor.calls, THRESHOLD, "the denied call never reached the vendor");
  });
});

test("plain tools arrays, no daemon: the OpenAI SDK's own loop reads the degraded denial and the degraded notice", async () => {
  await withDeadClient(async (c) => {
    const vendor = new Vendor();
    const run = new Run(c);
    const openaiTools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
      { type: "function", function: { name: "web_search", parameters: { type: "object", properties: {} } } },
      { type: "function", function: { name: "refund_charge", parameters: { type: "object", properties: {} } } },
    ];
    type Body = { tools?: { function: { name: string } }[]; messages: { role: string; content: string }[] };
    const bodies: Body[] = [];
    // The scripted API: it asks for refund_charge while offered; on its THRESHOLD-th request another call trips the fallback first.
    const api = await serve((_req, res, body) => {
      const b = JSON.parse(body) as Body;
      bodies.push(b);
      const call = (b.tools ?? []).some((t) => t.function.name === "refund_charge");
      const message = call
        ? { role: "assistant", content: null, tool_calls: [{ id: `c${bodies.length}`, type: "function", function: { name: "refund_charge", arguments: "{}" } }] }
        : { role: "assistant", content: "done" };
      const answer = () => {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ id: "x", object: "chat.completion", created: 0, model: "m", choices: [{ index: 0, message, finish_reason: call ? "tool_calls" : "stop" }] }));
      };
      if (bodies.length === THRESHOLD) void failElsewhere(c, vendor).then(answer);
      else answer();
    });
    try {
      const oa = new OpenAI({ apiKey: "test", baseURL: api.url, maxRetries: 0 });
      const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [{ role: "user", content: "refund ch_1" }];
      for (let turn = 0; turn < THRESHOLD + 2; turn++) {
        const tools = await plain.toolsForRun(run, openaiTools, { breakers });
        const notice = run.notice();
        const r = await oa.chat.completions.create({ model: "m", messages: notice ? [{ role: "system", content: notice }, ...messages] : messages, tools });
        const msg = r.choices[0]!.message;
        messages.push(msg);
        if (!msg.tool_calls?.length) break;
        for (const call of msg.tool_calls) {
          const name = call.type === "function" ? call.function.name : "";
          const content = await plain.runTool(run, name, () => vendor.refund(), { breakers }).catch((e: unknown) => String((e as Error).message));
          messages.push({ role: "tool", tool_call_id: call.id, content });
        }
      }
    } finally {
      await api.close();
    }
    const last = bodies.at(-1)!;
    assert.equal(bodies.length, THRESHOLD + 1);
    assert.deepEqual((last.tools ?? []).map((t) => t.function.name), ["web_search"], "the tool left the request after the trip");
    const system = last.messages.find((m) => m.role === "system")?.content ?? "";
    assert.ok(system.includes("- refund_charge: ") && system.includes(degradedSentence()), system);
    judgedAlone(last.messages.filter((m) => m.role === "tool").at(-1)!.content);
    assert.equal(vendor.calls, THRESHOLD, "the denied call never reached the vendor");
  });
});
