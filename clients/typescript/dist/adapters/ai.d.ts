import { type Run } from "../run.js";
import { type AdapterOptions } from "./common.js";
/** AiTool is what this adapter needs of an AI SDK tool: an optional execute(input, options). */
export interface AiTool {
    execute?: ((input: any, options: any) => unknown) | undefined;
}
/**
 * guardTools returns the tools with each execute guarded by run: a call
 * goes through breakerd (its outcome recorded), and a denial is returned
 * to the model as the denial's tool result. Tools without execute (the
 * model's, handled by the caller) are kept as they are.
 */
export declare function guardTools<T extends Record<string, AiTool>>(run: Run, tools: T, o?: AdapterOptions): T;
/**
 * toolsForRun returns the tools the run still has (Run.available: one
 * BatchGet), guarded. A tool whose breaker denies leaves the run for
 * good; give the model run.notice() so that it knows why.
 */
export declare function toolsForRun<T extends Record<string, AiTool>>(run: Run, tools: T, o?: AdapterOptions): Promise<Partial<T>>;
