// The OpenAI Agents SDK adapter (`@openai/agents`, an optional peer
// dependency of this entry point only): guardedTool builds a tool with
// the SDK's tool(), its execute guarded by a run (tool() turns what
// execute throws into text for the model, so the guard sits inside it),
// its failure text the shared one, and the tool disabled for the turns
// after its breaker denies.
//
//	const run = new Run({ workerId: "worker-1" }); // one per task, on the process's one Client
//	const refund = guardedTool(run, { name: "refund_charge", parameters: z.object({ charge_id: z.string() }), execute: ... });
//	const agent = new Agent({ name, instructions: () => base + "\n" + run.notice(), tools: [search, refund], model });

import { tool, type FunctionTool, type ToolInputParameters, type ToolOptions, type UnknownContext } from "@openai/agents";

import { toolSpan } from "../otel.js";
import { type Run } from "../run.js";
import { callTool, failureOf, refOf, ToolFailedError, type AdapterOptions } from "./common.js";

// Run too (and Client), so that adopting is one import line.
export { Client } from "../client.js";
export { Run } from "../run.js";
export { ToolFailedError } from "./common.js";

/** GuardedToolOptions are guardedTool's own options, beside tool()'s. */
export interface GuardedToolOptions {
  /** The breaker the tool's calls go through; the tool's name when absent. */
  breaker?: string | undefined;
  /** The tool's errors that are not its dependency's fault: recorded as never counted, and given to the model as they are. */
  exclude?: AdapterOptions["exclude"];
}

/**
 * guardedTool is tool(options) with execute guarded by run: a call goes
 * through breakerd (its outcome recorded); a denial is the tool's output
 * (the denial's tool result) and removes the tool from the run; a failure
 * reaches the model as the shared failure text (tool_failure.tmpl) unless
 * options.errorFunction says otherwise (it is given the ToolFailedError,
 * whose cause is what execute threw); and before each turn the run asks
 * breakerd for the tool's breaker (Run.available, one BatchGet within the
 * Allow budget): a tool whose breaker denies leaves the run, and is
 * disabled for its remaining turns whatever isEnabled says. Give the
 * agent the run's notice in its instructions (a function of the turn).
 * The parameters' zod schema types execute's input as tool() does.
 */
export function guardedTool<TParameters extends ToolInputParameters = undefined, Context = UnknownContext, Result = string>(
  run: Run,
  options: ToolOptions<TParameters, Context> & GuardedToolOptions,
): FunctionTool<Context, TParameters, Result> {
  const { breaker, exclude, ...opts } = options as ToolOptions<TParameters, Context> & GuardedToolOptions & Record<string, unknown>;
  const name = String(opts["name"]);
  const ref = { name, breaker: breaker ?? name };
  const exec = options.execute as (input: unknown, runContext?: unknown, details?: { signal?: AbortSignal }) => unknown;
  const userError = opts["errorFunction"] as ((ctx: unknown, err: unknown) => unknown) | null | undefined;
  const userEnabled = opts["isEnabled"] as boolean | ((args: unknown) => boolean | Promise<boolean>) | undefined;
  return tool({
    ...opts,
    execute: async (input: unknown, runContext?: unknown, details?: { signal?: AbortSignal }) => {
      try {
        return await toolSpan(name, () => callTool(run, ref, () => exec(input, runContext, details), { signal: details?.signal, exclude }));
      } catch (err) {
        throw failureOf(run, name, err, exclude);
      }
    },
    errorFunction:
      userError === null
        ? null
        : (ctx: unknown, err: unknown) => (userError ? userError(ctx, err) : err instanceof ToolFailedError ? err.message : String(err)),
    isEnabled: async (args: unknown) => {
      if (run.degraded.some((u) => u.tool === name) || (await run.available([ref])).length === 0) return false;
      return typeof userEnabled === "function" ? userEnabled(args) : (userEnabled ?? true);
    },
  } as unknown as ToolOptions<TParameters, Context>) as FunctionTool<Context, TParameters, Result>;
}

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
      toolSpan(d.name, () => callTool(run, refOf(d.name, o), () => d.execute(input, runContext, details), { signal: details?.signal, exclude: o.exclude })),
  }));
}

/**
 * toolsForRun returns the options of the tools the run still has
 * (Run.available), guarded, for the SDK's tool() to build: the way for
 * options of one shape (an array of several zod schemas fails to type
 * with tool(); guardedTool is the way for those).
 */
export async function toolsForRun<T extends AgentToolOptions>(run: Run, defs: readonly T[], o: AdapterOptions = {}): Promise<T[]> {
  const kept = new Set((await run.available(defs.map((d) => refOf(d.name, o)))).map((r) => r.name));
  return guardToolOptions(
    run,
    defs.filter((d) => kept.has(d.name)),
    o,
  );
}
