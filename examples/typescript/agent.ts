// An agent loop on @breakerd/client with the Vercel AI SDK, mirroring
// examples/agent: a scripted model (the SDK's MockLanguageModelV3) and two
// tools, web_search (healthy) and refund_charge (whose payment vendor goes
// down), run by two workers of one fleet against breakerd. It prints the
// tools each run gives the model: the vendor's outage trips the fleet's
// breaker, refund_charge leaves the next runs' tools, and the model is
// given the notice saying why.
//
//	go run ./cmd/breakerd --http-listen 127.0.0.1:7071 &
//	cd examples/typescript && npm ci && npm run build && node build/agent.js
//
// Flags: --url (breakerd's HTTP API, default http://127.0.0.1:7071),
// --prefix (of the breaker names, default "demo").

import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

import { Client, Run, throwForStatus } from "@breakerd/client";
import { toolsForRun } from "@breakerd/client/ai";
import { generateText, jsonSchema, stepCountIs, tool } from "ai";
import { MockLanguageModelV3 } from "ai/test";

/** A vendor of the example's own: it answers 200, or 503 once it is down, and counts requests. */
async function vendor(): Promise<{ url: string; hits: () => number; down: (d: boolean) => void; close: () => void }> {
  let hits = 0;
  let isDown = false;
  const srv: Server = createServer((_req, res) => {
    hits++;
    res.writeHead(isDown ? 503 : 200, { "content-type": "application/json" });
    res.end(isDown ? '{"error":{"code":"unavailable"}}' : '{"ok":true}');
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`,
    hits: () => hits,
    down: (d) => (isDown = d),
    close: () => srv.close(),
  };
}

/** call fetches url; a failed answer throws an HttpError that keeps its status and headers (throwForStatus). */
async function call(url: string): Promise<unknown> {
  return (await throwForStatus(await fetch(url))).json();
}

/** model scripts one run: call refund_charge when it has it (else web_search), then answer. */
function model(log: (s: string) => void) {
  const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
  return new MockLanguageModelV3({
    doGenerate: async (opts) => {
      const names = (opts.tools ?? []).map((t) => t.name);
      const result = opts.prompt.flatMap((m) => (m.role === "tool" ? m.content : [])).find((p) => p.type === "tool-result");
      if (!result) {
        const name = names.includes("refund_charge") ? "refund_charge" : "web_search";
        return { content: [{ type: "tool-call", toolCallId: "c1", toolName: name, input: "{}" }], finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [] };
      }
      const out = result.output;
      const text = !("value" in out) ? out.type : typeof out.value === "string" ? out.value : JSON.stringify(out.value);
      log(`  model calls ${result.toolName.padEnd(13)} -> ${text}`);
      return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] };
    },
  });
}

export async function main(args: string[], log: (s: string) => void = console.log): Promise<void> {
  const { values } = parseArgs({ args, options: { url: { type: "string", default: "http://127.0.0.1:7071" }, prefix: { type: "string", default: "demo" } } });
  const payments = await vendor();
  const search = await vendor();
  const breakers = { refund_charge: `${values.prefix}:payments`, web_search: `${values.prefix}:search` };
  const tools = {
    web_search: tool({ description: "Search the web.", inputSchema: jsonSchema<object>({ type: "object" }), execute: () => call(search.url) }),
    refund_charge: tool({ description: "Refund a card charge.", inputSchema: jsonSchema<object>({ type: "object" }), execute: () => call(payments.url) }),
  };
  const workers = [1, 2].map((i) => new Client({ urls: values.url!, workerId: `worker-${i}`, allowBudgetMs: 2000 }));
  log(`using breakerd at ${values.url}`);
  try {
    let lost = 0;
    for (let n = 1; n <= 20 && lost < 2; n++) {
      if (n === 3) {
        payments.down(true);
        log("\n*** the payment vendor goes down (HTTP 503) ***");
      }
      const client = workers[(n - 1) % 2]!;
      const run = new Run(client);
      const runTools = await toolsForRun(run, tools, { breakers });
      log(`\nrun ${n} on ${client.workerId}: tools given to the model: ${Object.keys(runTools).join(", ")}`);
      const notice = run.notice();
      if (notice) log("  notice given to the model:\n" + notice.replace(/^/gm, "    | "));
      await generateText({ model: model(log), tools: runTools, system: notice, prompt: "Refund charge ch_1.", stopWhen: stepCountIs(2) });
      if (!("refund_charge" in runTools)) lost++;
    }
    log(`\nthe payment vendor saw ${payments.hits()} requests, the search vendor ${search.hits()}`);
  } finally {
    payments.close();
    search.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    console.error("agent:", err);
    process.exit(1);
  });
}
