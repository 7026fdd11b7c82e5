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
/** MAX_SOCKETS bounds the connections to one daemon (calls past it wait for one). */
export declare const MAX_SOCKETS = 64;
/** MAX_HEAD bounds an answer's head (and a chunk's size line), in bytes; MAX_HEADERS its lines. */
export declare const MAX_HEAD: number;
export declare const MAX_HEADERS = 100;
/** A SocketUnary sends unary calls on sockets of its own; close ends them. */
export interface SocketUnary {
    unary: Unary;
    /** close destroys every connection: a call in flight, or waiting for a connection, ends with an error; a call made after opens new ones. */
    close(): void;
}
/** builtin is Node's module id (process.getBuiltinModule), or undefined where there is none. */
export declare function builtin<T>(id: string): T | undefined;
/** socketUnary returns a sender over node:net and node:tls, or undefined where they are not at hand. */
export declare function socketUnary(): SocketUnary | undefined;
/** utf8Length is the length of s in UTF-8, in bytes (a lone surrogate is written as U+FFFD, 3 bytes). */
export declare function utf8Length(s: string): number;
/** MAX_FRAMING bounds the bytes of one answer that are not its body: its heads (interim ones too), chunk lines and trailers. */
export declare const MAX_FRAMING: number;
/** Read is an answer read whole: the bytes that came after it, and whether its connection may serve another call. */
export interface Read {
    answer: UnaryAnswer;
    rest: Uint8Array;
    keep: boolean;
}
/**
 * Reader reads one answer from its connection's bytes as they come, each
 * byte once: the body's bytes are kept as they arrive, and only a line
 * not yet whole waits for more. It throws for bytes that are no HTTP/1.1
 * answer, a head or line past MAX_HEAD, framing past MAX_FRAMING,
 * BodyTooLarge for a body over its limit, and, once the connection ended,
 * for an answer cut short; a body framed by the end alone is whole then.
 * Every line (a head's, its blank line, a chunk's size line and the line
 * end after its data, a trailer) ends at an LF, a CR just before it
 * dropped (RFC 9112 §2.2): CRLF or a bare LF, mixed as they come.
 */
export declare class Reader {
    private readonly limit;
    private buf;
    private scanned;
    private phase;
    private head;
    private readonly body;
    private size;
    private left;
    private framing;
    private trailers;
    constructor(limit: number);
    /** push reads the bytes that came next (ended: the connection ended after them): the answer once whole, else undefined. */
    push(chunk: Uint8Array, ended: boolean): Read | undefined;
    /** step reads what the phase reads: on to the next phase, "more" when the bytes run out, "done" at the answer's end. */
    private step;
    private readHead;
    /** declare counts n more bytes of body against the limit. */
    private declare;
    /** take drops n bytes of framing from the front of buf. */
    private take;
    /** line is the line at the front of buf without its LF or CRLF, taken, or undefined before it has come. */
    private line;
    private readData;
    /** readChunkEnd takes the line end after a chunk's data: CRLF, or a bare LF. */
    private readChunkEnd;
    private readChunkSize;
    private readTrailer;
    private readToClose;
    private done;
}
