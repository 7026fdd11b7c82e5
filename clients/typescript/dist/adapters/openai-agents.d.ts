import { type FunctionTool, type ToolInputParameters, type ToolOptions, type UnknownContext } from "@openai/agents";
import { type Run } from "../run.js";
import { type AdapterOptions } from "./common.js";
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
export declare function guardedTool<TParameters extends ToolInputParameters = undefined, Context = UnknownContext, Result = string>(run: Run, options: ToolOptions<TParameters, Context> & GuardedToolOptions): FunctionTool<Context, TParameters, Result>;
/** AgentToolOptions is what this adapter needs of tool()'s options: a name and execute(input, runContext, details). */
export interface AgentToolOptions {
    name: string;
    execute: (input: any, runContext?: any, details?: any) => unknown;
}
/** guardToolOptions returns the options with execute guarded by run (a denial returns its tool result). */
export declare function guardToolOptions<T extends AgentToolOptions>(run: Run, defs: readonly T[], o?: AdapterOptions): T[];
/**
 * toolsForRun returns the options of the tools the run still has
 * (Run.available), guarded, for the SDK's tool() to build: the way for
 * options of one shape (an array of several zod schemas fails to type
 * with tool(); guardedTool is the way for those).
 */
export declare function toolsForRun<T extends AgentToolOptions>(run: Run, defs: readonly T[], o?: AdapterOptions): Promise<T[]>;
