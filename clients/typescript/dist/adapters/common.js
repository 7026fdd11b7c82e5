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
 * call's own denial the denial's tool_result text (the circuit_open JSON).
 * Any other error, an inner tool's denial included, is re-thrown.
 */
export async function callTool(run, tool, fn, signal) {
    let started = false;
    try {
        return await run.guard(tool, () => {
            started = true;
            return fn();
        }, { tool: tool.name, signal });
    }
    catch (err) {
        if (!started && err instanceof CircuitOpenError && err.breaker === breakerOf(tool))
            return err.toolResult;
        throw err;
    }
}
