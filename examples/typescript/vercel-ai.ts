// An agent on the Vercel AI SDK with breakerd, adopted as
// docs/typescript.md shows (the lines marked "breakerd"): a scripted model
// (the SDK's MockLanguageModelV3) and two tools, web_search (healthy) and
// refund_charge (whose payment vendor goes down), one generateText per
// customer request, run by two workers of one fleet. It prints what the
// model was given at each step: the vendor's outage trips the fleet's
// breaker, refund_charge leaves the remaining steps of the request that
// tripped it and every later request, and the model reads the notice
// saying why.
//
//	go run ./cmd/breakerd --http-listen 127.0.0.1:7071 &
//	cd examples/typescript && npm ci && npm run build && BREAKERD_URL=http://127.0.0.1:7071 node build/vercel-ai.js

import { pathToFileURL } from "node:url";

import { throwForStatus } from "@breakerd/client";
import { Run, guardTools, prepareStep } from "@breakerd/client/ai"; // breakerd
import { generateText, jsonSchema, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";

import { story } from "./vendor.js";

/** call fetches url; a failed answer throws an HttpError that keeps its status and headers (throwForStatus). */
async function call(url: string): Promise<unknown> {
  return (await throwForStatus(await fetch(url))).json();
}

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };

/**
 * model scripts a model that logs what each step gave it and calls
 * refund_charge while it is offered and has not succeeded, three times at
 * most (a model that retries a failure), then answers.
 */
function model(log: (s: string) => void) {
  return new MockLanguageModelV3({
    doGenerate: async (opts) => {
      const names = (opts.tools ?? []).map((t) => t.name);
      const last = opts.prompt.at(-1);
      let failed = true;
      if (last?.role === "tool") {
        for (const p of last.content) {
          if (p.type !== "tool-result") continue;
          failed = p.output.type === "error-text";
          log(`    ${p.toolName} -> ${"value" in p.output ? (typeof p.output.value === "string" ? p.output.value : JSON.stringify(p.output.value)) : p.output.type}`);
        }
      }
      const system = opts.prompt.find((m) => m.role === "system")?.content;
      log(`  step: the model is given ${names.join(", ")}${typeof system === "string" && system.includes("out of service") ? ", and the notice" : ""}`);
      const tries = opts.prompt.filter((m) => m.role === "tool").length;
      if (names.includes("refund_charge") && failed && tries < 3) {
        return { content: [{ type: "tool-call", toolCallId: "c1", toolName: "refund_charge", input: "{}" }], finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] };
      }
      return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
    },
  });
}

export async function main(log: (s: string) => void = console.log): Promise<void> {
  const system = "You are a support agent.";
  await story(log, async ({ workerId, payments, search }) => {
    const tools = {
      web_search: tool({ description: "Search the web.", inputSchema: jsonSchema<object>({ type: "object" }), execute: () => call(search) }),
      refund_charge: tool({ description: "Refund a card charge.", inputSchema: jsonSchema<object>({ type: "object" }), execute: () => call(payments) }),
    };
    const run = new Run({ workerId }); // breakerd
    await generateText({ model: model(log), tools: guardTools(run, tools), prepareStep: prepareStep(run, tools, { system }), prompt: "Refund charge ch_1.", stopWhen: stepCountIs(4) }); // breakerd
    if (run.notice()) log("  notice given to the model:\n" + run.notice().replace(/^/gm, "    | "));
  });
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  main().catch((err: unknown) => {
    console.error("vercel-ai:", err);
    process.exit(1);
  });
}
