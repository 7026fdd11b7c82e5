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
import { tool } from "@openai/agents";
import { toolSpan } from "../otel.js";
import { callTool, failureOf, refOf, ToolFailedError } from "./common.js";
// Run too (and Client), so that adopting is one import line.
export { Client } from "../client.js";
export { Run } from "../run.js";
export { ToolFailedError } from "./common.js";
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
export function guardedTool(run, options) {
    const { breaker, exclude, ...opts } = options;
    const name = String(opts["name"]);
    const ref = { name, breaker: breaker ?? name };
    const exec = options.execute;
    const userError = opts["errorFunction"];
    const userEnabled = opts["isEnabled"];
    return tool({
        ...opts,
        execute: async (input, runContext, details) => {
            try {
                return await toolSpan(name, () => callTool(run, ref, () => exec(input, runContext, details), { signal: details?.signal, exclude }));
            }
            catch (err) {
                throw failureOf(run, name, err, exclude);
            }
        },
        errorFunction: userError === null
            ? null
            : (ctx, err) => (userError ? userError(ctx, err) : err instanceof ToolFailedError ? err.message : String(err)),
        isEnabled: async (args) => {
            if (run.degraded.some((u) => u.tool === name) || (await run.available([ref])).length === 0)
                return false;
            return typeof userEnabled === "function" ? userEnabled(args) : (userEnabled ?? true);
        },
    });
}
/** guardToolOptions returns the options with execute guarded by run (a denial returns its tool result). */
export function guardToolOptions(run, defs, o = {}) {
    return defs.map((d) => ({
        ...d,
        execute: (input, runContext, details) => toolSpan(d.name, () => callTool(run, refOf(d.name, o), () => d.execute(input, runContext, details), { signal: details?.signal, exclude: o.exclude })),
    }));
}
/**
 * toolsForRun returns the options of the tools the run still has
 * (Run.available), guarded, for the SDK's tool() to build: the way for
 * options of one shape (an array of several zod schemas fails to type
 * with tool(); guardedTool is the way for those).
 */
export async function toolsForRun(run, defs, o = {}) {
    const kept = new Set((await run.available(defs.map((d) => refOf(d.name, o)))).map((r) => r.name));
    return guardToolOptions(run, defs.filter((d) => kept.has(d.name)), o);
}
