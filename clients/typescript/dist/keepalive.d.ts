/** UnaryAnswer is a unary call's whole answer: its status, its headers, its body as text. */
export interface UnaryAnswer {
    status: number;
    /** header is one response header's value (several joined with ", "), or null. */
    header(name: string): string | null;
    text: string;
}
/**
 * Unary posts body to url and resolves with the whole answer once it has
 * come. It rejects with BodyTooLarge for a body over limit bytes (the
 * connection is dropped), with the signal's reason when the signal ends
 * the call, and with a TypeError (its cause the socket's error) when the
 * request or its answer fails on the way.
 */
export type Unary = (url: URL, headers: Record<string, string>, body: string, signal: Stop | undefined, limit: number) => Promise<UnaryAnswer>;
/**
 * Stop ends a call early: an AbortSignal, or an Ender, whose listeners
 * are plain functions (transport.ts's bounds: an AbortController and an
 * EventTarget listener for each call cost a good part of its CPU).
 */
export type Stop = AbortSignal | Ender;
/** An Ender tells the functions given to on, once, when it ends; one that has ended tells none (as an AbortSignal's listeners). */
export interface Ender {
    readonly aborted: boolean;
    readonly reason: unknown;
    on(fn: () => void): void;
    off(fn: () => void): void;
}
/** onStop calls fn when s ends. */
export declare function onStop(s: Stop, fn: () => void): void;
/** offStop takes fn off s. */
export declare function offStop(s: Stop, fn: () => void): void;
/** BodyTooLarge is an answer whose body is over the bound: read no further. */
export declare class BodyTooLarge extends Error {
    readonly limit: number;
    readonly status: number;
    readonly contentType: string;
    constructor(limit: number, status: number, contentType: string);
}
/** KeepAliveFetch is a fetch, and a unary call, that hold their connections open between calls; close ends them. */
export interface KeepAliveFetch {
    fetch: typeof fetch;
    /** unary sends a unary call over the same connections as fetch, without fetch's Request, Response and stream. */
    unary: Unary;
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
/** utf8Length is the length of s in UTF-8, in bytes (a lone surrogate is written as U+FFFD, 3 bytes). */
export declare function utf8Length(s: string): number;
