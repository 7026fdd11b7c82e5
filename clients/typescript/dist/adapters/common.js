// What every framework adapter shares: a tool's call guarded by a run,
// with a denial handed to the model as its tool result rather than
// thrown, since a model acts on a result and a framework turns a throw
// into its own words.
import { CircuitOpenError } from "../errors.js";
import { breakerOf } from "../run.js";
/** refOf is the ToolRef of the tool named name. */
export function refOf(name, o = {}) {
    return { name, breaker: o.breakers?.[name] ?? name };
}
/**
 * callTool runs fn as a call of tool within run: its value, or for this
 * call's own denial its tool result (the JSON text the model reads).
 * Any other error, an inner tool's denial included, is re-thrown.
 */
export async function callTool(run, tool, fn, o = {}) {
    let started = false;
    try {
        return await run.guard(tool, () => {
            started = true;
            return fn();
        }, { tool: tool.name, signal: o.signal, exclude: o.exclude });
    }
    catch (err) {
        if (!started && err instanceof CircuitOpenError && err.breaker === breakerOf(tool))
            return err.toolResult;
        throw err;
    }
}
