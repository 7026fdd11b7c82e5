// What every framework adapter shares: a tool's call guarded by a run,
// with a denial handed to the model as its tool result rather than
// thrown, since a model acts on a result and a framework turns a throw
// into its own words.
import { CircuitOpenError } from "../errors.js";
import { renderToolFailure } from "../render.js";
import { breakerOf } from "../run.js";
/** refOf is the ToolRef of the tool named name. */
export function refOf(name, o = {}) {
    return { name, breaker: o.breakers?.[name] ?? name };
}
/**
 * ToolFailedError is a guarded tool's failure as a framework adapter
 * throws it: its message is the shared failure text for the model
 * (conformance/templates/tool_failure.tmpl), in place of the framework's
 * own invitation to try again; cause is what the tool threw, recorded as
 * it was.
 */
export class ToolFailedError extends Error {
    tool;
    name = "ToolFailedError";
    constructor(
    /** The tool's name, as the model knows it. */
    tool, cause) {
        super(renderToolFailure(tool), { cause });
        this.tool = tool;
    }
    /** toString is the failure text alone: what `ai` 7 gives the model (its tool error's toString). */
    toString() {
        return this.message;
    }
}
/**
 * failureOf is what a framework is handed for err, thrown by a call of
 * tool within run: err itself when it is not the dependency's failure (a
 * breaker's denial, an error exclude or the client's option excludes),
 * else a ToolFailedError carrying it.
 */
export function failureOf(run, tool, err, exclude) {
    if (err instanceof CircuitOpenError || err instanceof ToolFailedError || run.excludes(err, exclude))
        return err;
    return new ToolFailedError(tool, err);
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
