// The Vercel AI SDK adapter (`ai`): a tools object (name -> tool with
// execute), filtered per run and guarded. It imports nothing from `ai`:
// it keeps each tool as it is and wraps its execute.
//
//	const run = new Run(client);
//	const tools = await toolsForRun(run, { web_search, refund_charge }, { breakers: { refund_charge: "payments" } });
//	await generateText({ model, tools, system: run.notice(), prompt });
import { callTool, refOf } from "./common.js";
/**
 * guardTools returns the tools with each execute guarded by run: a call
 * goes through breakerd (its outcome recorded), and a denial is returned
 * to the model as the denial's tool result. Tools without execute (the
 * model's, handled by the caller) are kept as they are.
 */
export function guardTools(run, tools, o = {}) {
    const out = {};
    for (const [name, t] of Object.entries(tools)) {
        const exec = t.execute;
        out[name] = exec
            ? {
                ...t,
                execute: (input, options) => callTool(run, refOf(name, o), () => exec.call(t, input, options), { signal: options?.abortSignal, exclude: o.exclude }),
            }
            : t;
    }
    return out;
}
/**
 * toolsForRun returns the tools the run still has (Run.available: one
 * BatchGet), guarded. A tool whose breaker denies leaves the run for
 * good; give the model run.notice() so that it knows why.
 */
export async function toolsForRun(run, tools, o = {}) {
    const kept = await run.available(Object.keys(tools).map((n) => refOf(n, o)));
    const guarded = guardTools(run, tools, o);
    const out = {};
    for (const r of kept)
        out[r.name] = guarded[r.name];
    return out;
}
