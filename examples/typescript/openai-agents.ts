// An agent on the OpenAI Agents SDK with breakerd, adopted as
// docs/typescript.md shows (the lines marked "breakerd"): a scripted
// Model of the SDK's and two tools, web_search (healthy) and
// refund_charge (whose payment vendor goes down, guarded), one Runner.run
// per customer request, run by two workers of one fleet. It prints what
// the model was given at each turn: the vendor's outage trips the fleet's
// breaker, a failure reads as the shared failure text, refund_charge
// leaves the turns after its denial, and the model reads the notice.
//
//	go run ./cmd/breakerd --http-listen 127.0.0.1:7071 &
//	cd examples/typescript && npm ci && npm run build && BREAKERD_URL=http://127.0.0.1:7071 node build/openai-agents.js

import { pathToFileURL } from "node:url";

import { throwForStatus } from "@breakerd/client";
import { Run, guardedTool } from "@breakerd/client/openai-agents"; // breakerd
import { Agent, Runner, setTracingDisabled, tool, Usage, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import { z } from "zod";

import { story } from "./vendor.js";

/** call fetches url; a failed answer throws an HttpError that keeps its status and headers (throwForStatus). */
async function call(url: string): Promise<string> {
  return JSON.stringify(await (await throwForStatus(await fetch(url))).json());
}

/**
 * ScriptedModel logs what each turn gave it and calls refund_charge
 * while it is offered and has not succeeded, three times at most (a
 * model that retries a failure), then answers.
 */
class ScriptedModel implements Model {
  constructor(private readonly log: (s: string) => void) {}
  async getResponse(req: ModelRequest): Promise<ModelResponse> {
    const names = req.tools.map((t) => t.name);
    const last = Array.isArray(req.input) ? req.input.at(-1) : undefined;
    let failed = true;
    if (last?.type === "function_call_result" && typeof last.output === "object" && "text" in last.output) {
      failed = !last.output.text.startsWith('{"ok"');
      this.log(`    ${last.name} -> ${last.output.text}`);
    }
    this.log(`  turn: the model is given ${names.join(", ")}${req.systemInstructions?.includes("out of service") ? ", and the notice" : ""}`);
    const tries = Array.isArray(req.input) ? req.input.filter((i) => i.type === "function_call_result").length : 0;
    if (names.includes("refund_charge") && failed && tries < 3) {
      return { usage: new Usage(), output: [{ type: "function_call", callId: "c1", name: "refund_charge", arguments: '{"charge_id":"ch_1"}', status: "completed" }] };
    }
    return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }] };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("not scripted");
  }
}

export async function main(log: (s: string) => void = console.log): Promise<void> {
  setTracingDisabled(true);
  const runner = new Runner();
  await story(log, async ({ workerId, payments, search }) => {
    const run = new Run({ workerId }); // breakerd
    const webSearch = tool({ name: "web_search", description: "Search the web.", parameters: z.object({ query: z.string() }), execute: () => call(search) });
    const refundCharge = guardedTool(run, { name: "refund_charge", description: "Refund a card charge.", parameters: z.object({ charge_id: z.string() }), execute: () => call(payments) }); // breakerd
    const agent = new Agent({ name: "support", instructions: () => "You are a support agent.\n\n" + run.notice(), model: new ScriptedModel(log), tools: [webSearch, refundCharge] }); // breakerd
    await runner.run(agent, "Refund charge ch_1.", { maxTurns: 5 });
  });
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  main().catch((err: unknown) => {
    console.error("openai-agents:", err);
    process.exit(1);
  });
}
