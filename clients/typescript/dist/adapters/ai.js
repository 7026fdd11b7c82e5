// The Vercel AI SDK adapter (`ai`): a tools object (name -> tool with
// execute), guarded, and a prepareStep that gives each step of one
// generateText or streamText the tools the run still has and the notice.
// It imports nothing from `ai`: it keeps each tool as it is and wraps its
// execute.
//
//	const run = new Run({ workerId: "worker-1" }); // one per task, on the process's one Client
//	await generateText({ model, tools: guardTools(run, tools), prepareStep: prepareStep(run, tools, { system }), prompt });
import { callTool, failureOf, refOf } from "./common.js";
// Run too (and Client), so that adopting is one import line.
export { Client } from "../client.js";
export { Run } from "../run.js";
export { ToolFailedError } from "./common.js";
/**
 * guardTools returns the tools with each execute guarded by run: a call
 * goes through breakerd (its outcome recorded), a denial is returned to
 * the model as the denial's tool result, and a failure is thrown as a
 * ToolFailedError, whose message (what the SDK gives the model as the
 * tool's error) is the shared failure text. Tools without execute (the
 * model's, handled by the caller) are kept as they are.
 */
export function guardTools(run, tools, o = {}) {
    const out = {};
    for (const [name, t] of Object.entries(tools)) {
        const exec = t.execute;
        out[name] = exec
            ? {
                ...t,
                execute: async (input, options) => {
                    try {
                        return await callTool(run, refOf(name, o), () => exec.call(t, input, options), { signal: options?.abortSignal, exclude: o.exclude });
                    }
                    catch (err) {
                        throw failureOf(run, name, err, o.exclude);
                    }
                },
            }
            : t;
    }
    return out;
}
/**
 * prepareStep returns a prepareStep for generateText or streamText: before
 * each step, the run's tools are asked for (Run.available: one BatchGet
 * within the Allow budget), a tool whose breaker now denies leaves the
 * remaining steps (activeTools), and the system prompt is system followed
 * by the run's notice. A tool that left stays out for the run.
 */
export function prepareStep(run, tools, o = {}) {
    const refs = Object.keys(tools).map((n) => refOf(n, o));
    return async () => {
        const kept = await run.available(refs);
        const system = [o.system, run.notice()].filter(Boolean).join("\n\n");
        return { activeTools: kept.map((r) => r.name), ...(system ? { system } : {}) };
    };
}
/**
 * toolsForRun returns the tools the run still has (Run.available: one
 * BatchGet), guarded: for a loop of one step per call. Within one
 * generateText or streamText of several steps, prepareStep is the way.
 */
export async function toolsForRun(run, tools, o = {}) {
    const kept = await run.available(Object.keys(tools).map((n) => refOf(n, o)));
    const guarded = guardTools(run, tools, o);
    const out = {};
    for (const r of kept)
        out[r.name] = guarded[r.name];
    return out;
}
