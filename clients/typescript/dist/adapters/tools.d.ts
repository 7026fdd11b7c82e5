import { type Run } from "../run.js";
import { type AdapterOptions } from "./common.js";
/** ToolDefinition is any of these shapes (OpenAI's custom tools too); its name is what counts here. */
export type ToolDefinition = {
    name: string;
} | {
    function: {
        name: string;
    };
} | {
    custom: {
        name: string;
    };
};
/** toolName reads a definition's name. */
export declare function toolName(t: ToolDefinition): string;
/** toolsForRun returns the definitions of the tools the run still has (Run.available), in order. */
export declare function toolsForRun<T extends ToolDefinition>(run: Run, tools: readonly T[], o?: AdapterOptions): Promise<T[]>;
/**
 * runTool runs the model's call of the tool named name: fn's value as the
 * tool's content (a string as it is, anything else as JSON), or for a
 * denial the denial's tool result. fn's errors are re-thrown.
 */
export declare function runTool(run: Run, name: string, fn: () => unknown, o?: AdapterOptions & {
    signal?: AbortSignal;
}): Promise<string>;
