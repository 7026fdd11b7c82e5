// The OpenAI Agents SDK adapter (`@openai/agents`): the options of its
// tool() helper, filtered per run and with execute guarded, before tool()
// builds them (tool() turns what execute throws into text for the model,
// so the guard must sit inside it to see the failure). It imports nothing
// from the SDK.
//
//	const run = new Run(client);
//	const defs = await toolsForRun(run, [searchDef, refundDef], { breakers: { refund_charge: "payments" } });
//	const agent = new Agent({ name, instructions: base + "\n" + run.notice(), tools: defs.map(tool), model });

import { type Run } from "../run.js";
import { callTool, refOf, type AdapterOptions } from "./common.js";

/** AgentToolOptions is what this adapter needs of tool()'s options: a name and execute(input, runContext, details). */
export interface AgentToolOptions {
  name: string;
  execute: (input: any, runContext?: any, details?: any) => unknown;
}

/** guardToolOptions returns the options with execute guarded by run (a denial returns its tool result). */
export function guardToolOptions<T extends AgentToolOptions>(run: Run, defs: readonly T[], o: AdapterOptions = {}): T[] {
  return defs.map((d) => ({
    ...d,
    execute: (input: unknown, runContext?: unknown, details?: { signal?: AbortSignal }) =>
      callTool(run, refOf(d.name, o), () => d.execute(input, runContext, details), { signal: details?.signal, exclude: o.exclude }),
  }));
}

/** toolsForRun returns the options of the tools the run still has (Run.available), guarded. */
export async function toolsForRun<T extends AgentToolOptions>(run: Run, defs: readonly T[], o: AdapterOptions = {}): Promise<T[]> {
  const kept = new Set((await run.available(defs.map((d) => refOf(d.name, o)))).map((r) => r.name));
  return guardToolOptions(
    run,
    defs.filter((d) => kept.has(d.name)),
    o,
  );
}
