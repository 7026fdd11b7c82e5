/** KeepAliveFetch is a fetch that holds its connections open between calls; close ends them. */
export interface KeepAliveFetch {
    fetch: typeof fetch;
    /** close destroys the pooled sockets (a call in flight ends with an error). */
    close(): void;
}
/** MAX_SOCKETS bounds the connections to one daemon (calls past it queue in the agent). */
export declare const MAX_SOCKETS = 64;
/**
 * keepAliveFetch returns a fetch over node:http(s) with keep-alive agents
 * of its own, or undefined where node:http is not at hand (a browser, a
 * runtime without process.getBuiltinModule): the platform's fetch serves
 * there.
 */
export declare function keepAliveFetch(): KeepAliveFetch | undefined;
