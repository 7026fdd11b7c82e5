import type { ClientOptions, GuardOptions } from "./client.js";
import { Client } from "./client.js";
import { type StoredDenial } from "./denial.js";
/** ToolRef names a tool and the breaker its calls go through (the tool's own name when none). */
export interface ToolRef {
    name: string;
    breaker?: string | undefined;
}
/** breakerOf is the breaker a tool's calls go through. */
export declare function breakerOf(t: ToolRef): string;
/** Unavailable says why a tool left a run. */
export interface Unavailable {
    tool: string;
    breaker: string;
    /** The parent scope that made the tool unavailable; "" when its own breaker did (or this worker alone). */
    scope: string;
    /** The denial, as breakerd decided and worded it (or the fallback's own), on the run's clock. */
    denial: StoredDenial;
    /** When the run removed the tool (the run's clock, ms since the epoch). */
    removedAtMs: number;
    alternatives: string[];
    /** Judged by this worker's fallback: no daemon answered. */
    degraded: boolean;
}
/** SharedClientOptions name a Client that runs share: urls and token default to BREAKERD_URL and BREAKERD_TOKEN. */
export type SharedClientOptions = Pick<ClientOptions, "urls" | "token" | "workerId">;
/**
 * Run scopes one agent run on a Client: available() filters a toolset,
 * guard() runs a tool's call, notice() is what to tell the model, and
 * degraded what the run's result must carry. Removals are sticky.
 */
export declare class Run {
    private readonly clock;
    private readonly removed;
    private tools;
    private readonly client;
    /**
     * A run on client, or on the process's one Client for { workerId, urls,
     * token } (made on first use; any other option wants a Client of your
     * own).
     */
    constructor(client: Client | SharedClientOptions, clock?: () => number);
    /**
     * available returns the tools, in order, whose breakers breakerd does
     * not deny this worker now (each state's denial, one BatchGet within
     * the Allow budget), and removes the others from the run for good.
     * When no daemon answers, the client's fallback judges and removals are
     * marked degraded. The run keeps every tool it was asked about (the
     * latest ref of each name), for guard's removal of a breaker's tools.
     */
    available<T extends ToolRef>(tools: readonly T[], opts?: {
        signal?: AbortSignal;
    }): Promise<T[]>;
    /**
     * guard runs fn as a call of tool (Client.guard with the tool's name). A
     * tool already removed throws its CircuitOpenError without a round trip;
     * a denial removes the tool, and every tool the run was asked about
     * that shares its breaker, for the rest of the run.
     */
    guard<R>(tool: ToolRef, fn: () => R | Promise<R>, opts?: GuardOptions): Promise<R>;
    /** excludes is Client.excludes: err is not the dependency's fault (exclude, then the client's option). */
    excludes(err: unknown, exclude?: (err: unknown) => boolean): boolean;
    /**
     * remove takes a tool out of the run, once: each removal is one tool a
     * run left out, counted under the breaker that decided (the parent
     * scope when it did) in the client's savings report.
     */
    private remove;
    /** degraded is every tool the run lost, in the order they were removed. */
    get degraded(): Unavailable[];
    /** notice is the text to give the model about the tools the run lost; "" when none. */
    notice(): string;
}
