import { type Run } from "../run.js";
import { type AdapterOptions } from "./common.js";
export { Client } from "../client.js";
export { Run } from "../run.js";
export { ToolFailedError } from "./common.js";
/** AiTool is what this adapter needs of an AI SDK tool: an optional execute(input, options). */
export interface AiTool {
    execute?: ((input: any, options: any) => unknown) | undefined;
}
/**
 * guardTools returns the tools with each execute guarded by run: a call
 * goes through breakerd (its outcome recorded), a denial is returned to
 * the model as the denial's tool result, and a failure is thrown as a
 * ToolFailedError, whose message (what the SDK gives the model as the
 * tool's error) is the shared failure text. Tools without execute (the
 * model's, handled by the caller) are kept as they are.
 */
export declare function guardTools<T extends Record<string, AiTool>>(run: Run, tools: T, o?: AdapterOptions): T;
/** StepOptions are prepareStep's options. */
export interface StepOptions extends AdapterOptions {
    /** The system prompt, which each step gets with the run's notice after it (give it here rather than to generateText). */
    system?: string | undefined;
}
/** StepSettings is what prepareStep sets for one step: the tools the model may call, and the system prompt. */
export interface StepSettings<K extends string> {
    activeTools: K[];
    system?: string;
}
/**
 * prepareStep returns a prepareStep for generateText or streamText: before
 * each step, the run's tools are asked for (Run.available: one BatchGet
 * within the Allow budget), a tool whose breaker now denies leaves the
 * remaining steps (activeTools), and the system prompt is system followed
 * by the run's notice. A tool that left stays out for the run.
 */
export declare function prepareStep<T extends Record<string, AiTool>>(run: Run, tools: T, o?: StepOptions): () => Promise<StepSettings<keyof T & string>>;
/**
 * toolsForRun returns the tools the run still has (Run.available: one
 * BatchGet), guarded: for a loop of one step per call. Within one
 * generateText or streamText of several steps, prepareStep is the way.
 */
export declare function toolsForRun<T extends Record<string, AiTool>>(run: Run, tools: T, o?: AdapterOptions): Promise<Partial<T>>;
