// A Server-Sent Events reader over fetch's body stream (the WHATWG event
// stream format: https://html.spec.whatwg.org/multipage/server-sent-events.html),
// because Node has no EventSource before 22 and the client takes no
// runtime dependency.
/** MAX_SSE_LINE_CHARS bounds one line of the stream (a snapshot part's data line is well within it). */
export const MAX_SSE_LINE_CHARS = 8 << 20;
/** MAX_SSE_EVENT_CHARS bounds one event's data, its lines together. */
export const MAX_SSE_EVENT_CHARS = 8 << 20;
/** SSETooLarge is a line or an event over its bound: the stream is dropped. */
export class SSETooLarge extends Error {
    constructor(what, limit) {
        super(`${what} over ${limit} characters; stream dropped`);
    }
}
/**
 * readSSE yields the events of a text/event-stream body until it ends.
 * Comment lines (heartbeats) dispatch nothing; `retry:` is ignored (the
 * caller owns its reconnection policy). heard is called for every chunk
 * read (an event, a heartbeat or a part of either): the caller's watch
 * on silence. A line or an event over its bound throws SSETooLarge.
 */
export async function* readSSE(body, heard = () => undefined) {
    const decoder = new TextDecoder("utf-8");
    const reader = body.getReader();
    let buf = "";
    let event = "";
    let data = [];
    let size = 0;
    let id = "";
    let first = true;
    try {
        for (;;) {
            const { value, done } = await reader.read();
            heard();
            buf += done ? decoder.decode() : decoder.decode(value, { stream: true });
            if (first && buf.length > 0) {
                if (buf.charCodeAt(0) === 0xfeff)
                    buf = buf.slice(1);
                first = false;
            }
            for (;;) {
                const m = /\r\n|\r|\n/.exec(buf);
                // A lone \r at the end may be half of \r\n: wait for more.
                if (!m || (m[0] === "\r" && m.index === buf.length - 1 && !done)) {
                    if (buf.length > MAX_SSE_LINE_CHARS)
                        throw new SSETooLarge("a line", MAX_SSE_LINE_CHARS);
                    break;
                }
                const line = buf.slice(0, m.index);
                buf = buf.slice(m.index + m[0].length);
                if (line === "") {
                    if (data.length > 0)
                        yield { event: event || "message", data: data.join("\n"), id };
                    event = "";
                    data = [];
                    size = 0;
                    continue;
                }
                if (line.startsWith(":"))
                    continue;
                const colon = line.indexOf(":");
                const field = colon < 0 ? line : line.slice(0, colon);
                let value = colon < 0 ? "" : line.slice(colon + 1);
                if (value.startsWith(" "))
                    value = value.slice(1);
                switch (field) {
                    case "event":
                        event = value;
                        break;
                    case "data":
                        size += value.length + 1;
                        if (size > MAX_SSE_EVENT_CHARS)
                            throw new SSETooLarge("an event", MAX_SSE_EVENT_CHARS);
                        data.push(value);
                        break;
                    case "id":
                        if (!value.includes("\0"))
                            id = value;
                        break;
                }
            }
            if (done)
                return; // an event not ended by a blank line is dropped, as EventSource drops it
        }
    }
    finally {
        reader.releaseLock();
        await body.cancel().catch(() => undefined);
    }
}
