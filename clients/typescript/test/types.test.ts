// A type test: tsc --strict compiles this file with the suite
// (tsconfig.test.json), so guardedTool must keep the zod inference of
// the SDK's tool(): tools of different schemas go in one Agent's tools,
// and each execute's input is its own schema's type (not any).

import assert from "node:assert/strict";
import { test } from "node:test";

import { Agent, type FunctionTool } from "@openai/agents";
import { z } from "zod";

import { Client, Run } from "../src/index.js";
import { guardedTool } from "../src/adapters/openai-agents.js";
import { DEAD_URL } from "./helpers.js";

/** tools builds two tools of different zod schemas, typed as the SDK types them. */
function tools(run: Run) {
  const search = guardedTool(run, {
    name: "web_search",
    description: "Search the web.",
    parameters: z.object({ query: z.string() }),
    execute: async ({ query }) => {
      const q: string = query;
      return q;
    },
  });
  const refund = guardedTool(run, {
    name: "refund_charge",
    description: "Refund a charge.",
    parameters: z.object({ charge_id: z.string(), amount_cents: z.number().int().optional() }),
    breaker: "payments",
    execute: async (input) => {
      const id: string = input.charge_id;
      const cents: number | undefined = input.amount_cents;
      // @ts-expect-error the schema has no such field: the input is typed, not any
      void input.customer;
      return `${id} ${cents ?? "all"}`;
    },
  });
  return [search, refund] as const;
}

test("guardedTool: tools of two zod schemas type-check in one Agent (tsc --strict) and stay function tools", () => {
  const run = new Run(new Client({ urls: DEAD_URL, workerId: "w", onError: () => {} }));
  const [search, refund] = tools(run);
  const agent = new Agent({ name: "support", instructions: "Help.", tools: [search, refund] });
  const typed: FunctionTool<unknown, z.ZodObject<{ query: z.ZodString }>, string> = search;
  assert.deepEqual(agent.tools.map((t) => [t.type, t.name]), [["function", "web_search"], ["function", "refund_charge"]]);
  assert.equal(typed.name, "web_search");
});
