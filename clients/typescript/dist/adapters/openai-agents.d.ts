import { type Run } from "../run.js";
import { type AdapterOptions } from "./common.js";
/** AgentToolOptions is what this adapter needs of tool()'s options: a name and execute(input, runContext, details). */
export interface AgentToolOptions {
    name: string;
    execute: (input: any, runContext?: any, details?: any) => unknown;
}
/** guardToolOptions returns the options with execute guarded by run (a denial returns its tool result). */
export declare function guardToolOptions<T extends AgentToolOptions>(run: Run, defs: readonly T[], o?: AdapterOptions): T[];
/** toolsForRun returns the options of the tools the run still has (Run.available), guarded. */
export declare function toolsForRun<T extends AgentToolOptions>(run: Run, defs: readonly T[], o?: AdapterOptions): Promise<T[]>;
