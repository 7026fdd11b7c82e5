// Plain tools arrays, as the OpenAI and Anthropic SDKs take them: the
// chat completions shapes ({type:"function", function:{name}} and
// {type:"custom", custom:{name}}), the responses shape ({type:"function",
// name}) and Anthropic's ({name, input_schema}). The caller runs its own loop; this filters the array
// per run and runs each call guarded.
//
//	const run = new Run(client);
//	const tools = await toolsForRun(run, allTools, { breakers: { refund_charge: "payments" } });
//	// ... for each tool call the model makes:
//	const content = await runTool(run, call.name, () => handlers[call.name](args), { breakers });

import { type Run } from "../run.js";
import { callTool, refOf, type AdapterOptions } from "./common.js";

/** ToolDefinition is any of these shapes (OpenAI's custom tools too); its name is what counts here. */
export type ToolDefinition = { name: string } | { function: { name: string } } | { custom: { name: string } };

/** toolName reads a definition's name. */
export function toolName(t: ToolDefinition): string {
  if ("function" in t && typeof t.function === "object") return t.function.name;
  if ("custom" in t && typeof t.custom === "object") return t.custom.name;
  return (t as { name: string }).name;
}

/** toolsForRun returns the definitions of the tools the run still has (Run.available), in order. */
export async function toolsForRun<T extends ToolDefinition>(run: Run, tools: readonly T[], o: AdapterOptions = {}): Promise<T[]> {
  const kept = new Set((await run.available(tools.map((t) => refOf(toolName(t), o)))).map((r) => r.name));
  return tools.filter((t) => kept.has(toolName(t)));
}

/**
 * runTool runs the model's call of the tool named name: fn's value as the
 * tool's content (a string as it is, anything else as JSON), or for a
 * denial the denial's tool result. fn's errors are re-thrown.
 */
export async function runTool(run: Run, name: string, fn: () => unknown, o: AdapterOptions & { signal?: AbortSignal } = {}): Promise<string> {
  const v = await callTool(run, refOf(name, o), fn, { signal: o.signal, exclude: o.exclude });
  return typeof v === "string" ? v : JSON.stringify(v ?? null);
}
