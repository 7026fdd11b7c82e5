import { type Unary } from "./unary.js";
/** KeepAliveFetch is a fetch, and a unary call, that hold their connections open between calls; close ends them. */
export interface KeepAliveFetch {
    fetch: typeof fetch;
    /** unary sends a unary call on connections of its own, without fetch's Request, Response and stream, or node:http's objects. */
    unary: Unary;
    /** close destroys the pooled sockets of both (a call in flight ends with an error). */
    close(): void;
}
/**
 * keepAliveFetch returns a fetch over node:http(s) with keep-alive agents
 * of its own, and the unary sender, or undefined where Node's modules are
 * not at hand (a browser, a runtime without process.getBuiltinModule):
 * the platform's fetch serves there.
 */
export declare function keepAliveFetch(): KeepAliveFetch | undefined;
