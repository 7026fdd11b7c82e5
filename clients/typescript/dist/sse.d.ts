/** SSEMessage is one dispatched event. */
export interface SSEMessage {
    /** The event's type; "message" when the stream named none. */
    event: string;
    data: string;
    /** The last event id the stream set (kept across events, as EventSource keeps it). */
    id: string;
}
/** MAX_SSE_LINE_CHARS bounds one line of the stream (a snapshot part's data line is well within it). */
export declare const MAX_SSE_LINE_CHARS: number;
/** MAX_SSE_EVENT_CHARS bounds one event's data, its lines together. */
export declare const MAX_SSE_EVENT_CHARS: number;
/** SSETooLarge is a line or an event over its bound: the stream is dropped. */
export declare class SSETooLarge extends Error {
    constructor(what: string, limit: number);
}
/**
 * readSSE yields the events of a text/event-stream body until it ends.
 * Comment lines (heartbeats) dispatch nothing; `retry:` is ignored (the
 * caller owns its reconnection policy). heard is called for every chunk
 * read (an event, a heartbeat or a part of either): the caller's watch
 * on silence. A line or an event over its bound throws SSETooLarge.
 */
export declare function readSSE(body: ReadableStream<Uint8Array>, heard?: () => void): AsyncGenerator<SSEMessage>;
