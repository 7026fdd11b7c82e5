// A unary call's sender on Node: HTTP/1.1 POSTs written straight onto
// keep-alive sockets of node:net (node:tls for https), their answers read
// off the bytes as they arrive, with none of node:http's objects per call
// (their CPU: docs/typescript.md#keep-alive). Like node:http's keep-alive
// agent it keeps at most MAX_SOCKETS connections per daemon (calls past
// them wait for one), idle ones open and unref'd, and closes every one on
// close(). Its bounds: an answer's head is at most MAX_HEAD bytes
// (node:http's own bound) and MAX_HEADERS lines; a body over the call's
// limit is refused (BodyTooLarge) and its connection dropped. node:net
// and node:tls are loaded through process.getBuiltinModule, so the core
// imports nothing but the platform.
/** onStop calls fn when s ends. */
export function onStop(s, fn) {
    if ("on" in s)
        s.on(fn);
    else
        s.addEventListener("abort", fn, { once: true });
}
/** offStop takes fn off s. */
export function offStop(s, fn) {
    if ("on" in s)
        s.off(fn);
    else
        s.removeEventListener("abort", fn);
}
/** BodyTooLarge is an answer whose body is over the bound: read no further. */
export class BodyTooLarge extends Error {
    limit;
    status;
    contentType;
    constructor(limit, status, contentType) {
        super(`the body is over ${limit} bytes; refused`);
        this.limit = limit;
        this.status = status;
        this.contentType = contentType;
    }
}
/** MAX_SOCKETS bounds the connections to one daemon (calls past it wait for one). */
export const MAX_SOCKETS = 64;
/** MAX_HEAD bounds an answer's head (and a chunk's size line), in bytes; MAX_HEADERS its lines. */
export const MAX_HEAD = 16 << 10;
export const MAX_HEADERS = 100;
/** builtin is Node's module id (process.getBuiltinModule), or undefined where there is none. */
export function builtin(id) {
    const proc = globalThis.process;
    return typeof proc?.getBuiltinModule === "function" ? proc.getBuiltinModule(id) : undefined;
}
/** socketUnary returns a sender over node:net and node:tls, or undefined where they are not at hand. */
export function socketUnary() {
    const net = builtin("node:net");
    const tls = builtin("node:tls");
    if (!net || !tls)
        return undefined;
    const pools = new Map();
    const unary = (url, headers, body, signal, limit) => {
        if (url.protocol !== "http:" && url.protocol !== "https:")
            return Promise.reject(new TypeError(`unary: ${url.protocol} is not http(s)`));
        let p = pools.get(url.origin);
        if (!p)
            pools.set(url.origin, (p = new Pool(url, url.protocol === "https:" ? tls : net)));
        return p.call(url, headers, body, signal, limit);
    };
    const close = () => {
        pools.forEach((p) => p.close());
        pools.clear(); // a call after close opens connections anew
    };
    return { unary, close };
}
/** Pool is one daemon's connections: the idle ones, and those open in all. */
class Pool {
    mod;
    idle = [];
    waiting = [];
    open = new Set();
    closed = false;
    host;
    port;
    constructor(url, mod) {
        this.mod = mod;
        // node:net wants an IPv6 literal without its brackets.
        this.host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
        this.port = Number(url.port || (url.protocol === "https:" ? 443 : 80));
    }
    async call(url, headers, body, signal, limit) {
        if (signal?.aborted)
            throw signal.reason;
        const request = head(url, headers, body) + body;
        const first = this.idle.pop() ?? this.fresh(signal);
        let c = first instanceof Conn ? first : await first;
        for (let retried = false;; retried = true) {
            const reused = c.calls > 0;
            try {
                const a = await c.roundTrip(request, signal, limit);
                this.release(c);
                return a;
            }
            catch (err) {
                this.drop(c);
                if (!(err instanceof Lost))
                    throw err;
                if (this.closed)
                    throw new TypeError("fetch failed", { cause: CLOSED });
                // A kept connection that ended before its answer began: the
                // daemon closed it while idle, as the request went out. The call
                // goes once more (a Record carries its record_id: one that did
                // reach the daemon is counted once).
                if (!reused || retried)
                    throw err.error;
                c = await this.fresh(signal);
            }
        }
    }
    /** fresh is a new connection, or, with MAX_SOCKETS open, the next one another call lets go. */
    fresh(signal) {
        return this.open.size < MAX_SOCKETS ? this.dial() : this.wait(signal);
    }
    /** wait is the next connection another call lets go (or a fresh one, when one closed), or the signal's reason. */
    wait(signal) {
        return new Promise((resolve, reject) => {
            if (signal?.aborted)
                return reject(signal.reason);
            const w = {
                take: (c) => {
                    if (signal)
                        offStop(signal, gone);
                    resolve(c ?? this.dial());
                },
                fail: (err) => {
                    if (signal)
                        offStop(signal, gone);
                    reject(err);
                },
            };
            const gone = () => {
                this.waiting.splice(this.waiting.indexOf(w), 1);
                reject(signal?.reason);
            };
            if (signal)
                onStop(signal, gone);
            this.waiting.push(w);
        });
    }
    dial() {
        const o = isIP(this.host) ? { host: this.host, port: this.port, ALPNProtocols: ["http/1.1"] } : { host: this.host, port: this.port, servername: this.host, ALPNProtocols: ["http/1.1"] };
        const c = new Conn(this.mod.connect(o), () => this.drop(c));
        this.open.add(c);
        return c;
    }
    /** release takes back c after an answer: to the next waiting call, kept idle, or closed. */
    release(c) {
        if (!c.reusable || !this.open.has(c))
            return this.drop(c); // not fit, or closed since its answer came
        const w = this.waiting.shift();
        if (w)
            return w.take(c);
        if (this.idle.length >= MAX_SOCKETS)
            return this.drop(c);
        c.sock.unref();
        this.idle.push(c);
    }
    /** drop closes c, and lets a waiting call open a connection in its place. */
    drop(c) {
        if (!this.open.delete(c))
            return;
        const i = this.idle.indexOf(c);
        if (i >= 0)
            this.idle.splice(i, 1);
        c.sock.destroy();
        if (!this.closed)
            this.waiting.shift()?.take(undefined);
    }
    /** close ends every connection, and every call on one or waiting for one, with an error. */
    close() {
        this.closed = true;
        for (const w of this.waiting.splice(0))
            w.fail(new TypeError("fetch failed", { cause: CLOSED }));
        for (const c of [...this.open])
            this.drop(c);
    }
}
/** CLOSED is the cause of a call's error when the sender was closed meanwhile. */
const CLOSED = new Error("the client was closed");
/** isIP says whether host is an IP literal (TLS names no IP as its server). */
function isIP(host) {
    return host.includes(":") || /^[\d.]+$/.test(host);
}
/** BAD are the characters a header may not carry: one would end it, or start another. */
const BAD = /[\r\n\0]/;
/** head is a request's head: its line, Host, the headers, the body's length in UTF-8. */
function head(url, headers, body) {
    let h = `POST ${url.pathname} HTTP/1.1\r\nHost: ${url.host}\r\n`;
    for (const k in headers) {
        const v = headers[k];
        if (BAD.test(k) || BAD.test(v))
            throw new TypeError(`unary: the header ${JSON.stringify(k)} carries a line break`);
        h += `${k}: ${v}\r\n`;
    }
    return h + `Content-Length: ${utf8Length(body)}\r\n\r\n`;
}
/** utf8Length is the length of s in UTF-8, in bytes (a lone surrogate is written as U+FFFD, 3 bytes). */
export function utf8Length(s) {
    let n = s.length;
    for (let i = 0; i < s.length; i++) {
        const c = s.charCodeAt(i);
        if (c < 0x80)
            continue;
        if (c < 0x800)
            n += 1;
        else if (c >= 0xd800 && c <= 0xdbff && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00)
            i++, (n += 2);
        else
            n += 2;
    }
    return n;
}
/** Lost is a connection that ended before its answer began: on a kept connection the request may go again, fresh. */
class Lost {
    error;
    constructor(error) {
        this.error = error;
    }
}
const EMPTY = new Uint8Array(0);
/**
 * Conn is one keep-alive connection: a call's request goes out in one
 * write, and what arrives is read as its answer; bytes no call asked for,
 * or an end, close it (gone tells its pool).
 */
class Conn {
    sock;
    gone;
    /** calls counts the requests sent; reusable says whether the last answer left the connection fit for another. */
    calls = 0;
    reusable = false;
    call;
    ended = false;
    constructor(sock, gone) {
        this.sock = sock;
        this.gone = gone;
        sock.setNoDelay(true);
        sock.on("data", (chunk) => this.arrived(chunk));
        sock.on("end", () => this.end(undefined));
        sock.on("close", () => this.end(undefined));
        sock.on("error", (err) => this.end(err));
    }
    /** roundTrip sends request and resolves with its answer; rejects with Lost when the connection ended before the answer began. */
    roundTrip(request, signal, limit) {
        this.calls++;
        this.reusable = false;
        this.sock.ref();
        return new Promise((resolve, reject) => {
            if (signal?.aborted)
                return reject(signal.reason); // while the call waited for its connection
            const onAbort = () => this.settle(signal?.reason);
            this.call = { resolve, reject, signal, onAbort, reader: new Reader(limit), heard: false };
            if (signal)
                onStop(signal, onAbort);
            if (this.ended)
                return this.settle(new Lost(new TypeError("fetch failed", { cause: new Error("the connection had closed") })));
            this.sock.write(request);
        });
    }
    /** settle ends the call: with its answer, or rejected with err. */
    settle(err, answer) {
        const c = this.call;
        if (!c)
            return;
        this.call = undefined;
        if (c.signal)
            offStop(c.signal, c.onAbort);
        if (answer)
            c.resolve(answer);
        else
            c.reject(err);
    }
    arrived(chunk) {
        if (!this.call)
            return this.gone(); // bytes no call asked for: not a connection to reuse
        this.call.heard = true;
        this.read(chunk, false);
    }
    end(err) {
        if (this.ended)
            return;
        this.ended = true;
        this.reusable = false;
        if (this.call && !this.call.heard) {
            this.settle(new Lost(new TypeError("fetch failed", { cause: err ?? new Error("the connection closed before an answer") })));
        }
        else if (this.call) {
            this.read(EMPTY, true);
            this.settle(new TypeError("terminated", { cause: err ?? new Error("the connection closed within the answer") }));
        }
        this.gone();
    }
    /** read gives the call's reader what came, and settles the call once its answer is whole (or refused). */
    read(chunk, ended) {
        let got;
        try {
            got = this.call.reader.push(chunk, ended);
        }
        catch (err) {
            return this.settle(err instanceof BodyTooLarge ? err : new TypeError("fetch failed", { cause: err }));
        }
        if (!got)
            return;
        this.reusable = got.keep && !ended && got.rest.byteLength === 0;
        this.settle(undefined, got.answer);
    }
}
/** concat joins chunks, size bytes in all. */
function concat(chunks, size) {
    const all = new Uint8Array(size);
    let at = 0;
    for (const c of chunks) {
        all.set(c, at);
        at += c.byteLength;
    }
    return all;
}
const utf8 = new TextDecoder("utf-8");
const latin1 = new TextDecoder("latin1");
/** MAX_FRAMING bounds the bytes of one answer that are not its body: its heads (interim ones too), chunk lines and trailers. */
export const MAX_FRAMING = 64 << 10;
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
export class Reader {
    limit;
    buf = EMPTY; // bytes come and not read yet: part of a line, or of the line end after a chunk
    scanned = 0; // how far buf was searched for its line's end
    phase = "head";
    head;
    body = [];
    size = 0; // the body's bytes, as its framing declared them
    left = 0; // the bytes of the body, or of the chunk, still to come
    framing = 0;
    trailers = 0;
    constructor(limit) {
        this.limit = limit;
    }
    /** push reads the bytes that came next (ended: the connection ended after them): the answer once whole, else undefined. */
    push(chunk, ended) {
        this.buf = this.buf.byteLength === 0 ? chunk : concat([this.buf, chunk], this.buf.byteLength + chunk.byteLength);
        for (;;) {
            const step = this.step(ended);
            if (step === "more") {
                if (ended)
                    throw new Error(`the connection closed within the answer's ${this.phase === "head" ? "head" : "body"}`);
                return undefined;
            }
            if (step === "done")
                return this.done(ended);
        }
    }
    /** step reads what the phase reads: on to the next phase, "more" when the bytes run out, "done" at the answer's end. */
    step(ended) {
        switch (this.phase) {
            case "head":
                return this.readHead();
            case "length":
            case "chunk-data":
                return this.readData();
            case "chunk-end":
                return this.readChunkEnd();
            case "chunk-size":
                return this.readChunkSize();
            case "trailers":
                return this.readTrailer();
            case "close":
                return this.readToClose(ended);
            case "done":
                return "done";
        }
    }
    readHead() {
        const end = headEnd(this.buf, this.scanned);
        if (end < 0) {
            if (this.buf.byteLength >= MAX_HEAD)
                throw new Error(`an answer's head over ${MAX_HEAD} bytes`);
            this.scanned = this.buf.byteLength;
            return "more";
        }
        const h = headOf(this.buf.subarray(0, end - (this.buf[end - 2] === 10 ? 1 : 2))); // its blank line, LF or CRLF, left off
        this.take(end);
        if (h.status < 200 && h.status !== 101)
            return "next"; // an interim answer (100 Continue): the real one follows
        this.head = h;
        if (h.status === 204 || h.status === 304)
            return (this.phase = "done"), "done";
        if (/chunked/i.test(h.headers.get("transfer-encoding") ?? ""))
            return (this.phase = "chunk-size"), "next";
        const length = h.headers.get("content-length");
        if (length === undefined)
            return (this.phase = "close"), "next";
        if (!/^\d+$/.test(length))
            throw new Error(`a Content-Length of ${JSON.stringify(length)}`);
        this.left = this.declare(Number(length));
        this.phase = "length";
        return "next";
    }
    /** declare counts n more bytes of body against the limit. */
    declare(n) {
        if ((this.size += n) > this.limit)
            throw new BodyTooLarge(this.limit, this.head?.status ?? 0, this.head?.headers.get("content-type") ?? "");
        return n;
    }
    /** take drops n bytes of framing from the front of buf. */
    take(n) {
        if ((this.framing += n) > MAX_FRAMING)
            throw new Error(`an answer's heads and chunk lines over ${MAX_FRAMING} bytes`);
        this.buf = this.buf.subarray(n);
        this.scanned = 0;
    }
    /** line is the line at the front of buf without its LF or CRLF, taken, or undefined before it has come. */
    line() {
        const nl = this.buf.indexOf(10, this.scanned);
        if (nl < 0) {
            if (this.buf.byteLength >= MAX_HEAD)
                throw new Error(`a line of the answer over ${MAX_HEAD} bytes`);
            this.scanned = this.buf.byteLength;
            return undefined;
        }
        const text = latin1.decode(this.buf.subarray(0, nl)).replace(/\r$/, "");
        this.take(nl + 1);
        return text;
    }
    readData() {
        const n = Math.min(this.left, this.buf.byteLength);
        if (n > 0) {
            this.body.push(this.buf.subarray(0, n));
            this.buf = this.buf.subarray(n);
            this.left -= n;
        }
        if (this.left > 0)
            return "more";
        if (this.phase === "length")
            return (this.phase = "done"), "done";
        this.phase = "chunk-end";
        return "next";
    }
    /** readChunkEnd takes the line end after a chunk's data: CRLF, or a bare LF. */
    readChunkEnd() {
        const n = this.buf[0] === 10 ? 1 : 2;
        if (this.buf.byteLength < n)
            return "more";
        if (n === 2 && (this.buf[0] !== 13 || this.buf[1] !== 10))
            throw new Error("a chunk longer than its size");
        this.take(n);
        this.phase = "chunk-size";
        return "next";
    }
    readChunkSize() {
        const line = this.line();
        if (line === undefined)
            return "more";
        const m = /^([0-9a-fA-F]{1,12})(?:\s*;.*)?$/.exec(line);
        if (!m)
            throw new Error(`a chunk size of ${JSON.stringify(line.slice(0, 80))}`);
        const n = parseInt(m[1], 16);
        this.left = this.declare(n);
        this.phase = n === 0 ? "trailers" : "chunk-data";
        return "next";
    }
    readTrailer() {
        const line = this.line();
        if (line === undefined)
            return "more";
        if (line === "")
            return (this.phase = "done"), "done";
        if (++this.trailers > MAX_HEADERS)
            throw new Error(`more than ${MAX_HEADERS} trailer lines`);
        return "next";
    }
    readToClose(ended) {
        if (this.buf.byteLength > 0) {
            this.declare(this.buf.byteLength);
            this.body.push(this.buf);
            this.buf = EMPTY;
        }
        return ended ? "done" : "more";
    }
    done(ended) {
        const h = this.head;
        const size = this.body.reduce((n, b) => n + b.byteLength, 0);
        const text = utf8.decode(this.body.length === 1 ? this.body[0] : concat(this.body, size));
        const answer = { status: h.status, header: (name) => h.headers.get(name.toLowerCase()) ?? null, text };
        return { answer, rest: this.buf, keep: h.keep && this.phase !== "close" && !ended };
    }
}
/** headOf reads a head's lines, each ended by its LF or CRLF (its blank line left off). */
function headOf(bytes) {
    const lines = latin1.decode(bytes).split(/\r?\n/);
    lines.pop(); // the nothing after the last line's end
    if (lines.length > MAX_HEADERS + 1)
        throw new Error(`an answer's head of more than ${MAX_HEADERS} lines`);
    const m = /^HTTP\/1\.([01]) (\d{3})(?: |$)/.exec(lines[0]);
    if (!m)
        throw new Error(`a first line that is not an HTTP status line: ${JSON.stringify(lines[0].slice(0, 80))}`);
    const headers = new Map();
    for (let i = 1; i < lines.length; i++) {
        const line = lines[i];
        const colon = line.indexOf(":");
        if (colon <= 0)
            throw new Error(`a header line without a name: ${JSON.stringify(line.slice(0, 80))}`);
        const k = line.slice(0, colon).trim().toLowerCase();
        const v = line.slice(colon + 1).trim();
        const was = headers.get(k);
        headers.set(k, was === undefined ? v : `${was}, ${v}`);
    }
    const keep = m[1] === "1" && !/(^|,)\s*close\s*(,|$)/i.test(headers.get("connection") ?? "");
    return { status: Number(m[2]), keep, headers };
}
/**
 * headEnd is where the head at the front of buf ends (past its blank line:
 * an LF or CRLF right after a line's LF), within MAX_HEAD bytes, or -1
 * before it has. It looks at the LFs from at on: one before at was looked
 * at already, with the bytes before it that tell.
 */
function headEnd(buf, at) {
    const stop = Math.min(buf.byteLength, MAX_HEAD);
    for (let i = buf.indexOf(10, at); i >= 0 && i < stop; i = buf.indexOf(10, i + 1)) {
        if (buf[i - 1] === 10 || (buf[i - 1] === 13 && buf[i - 2] === 10))
            return i + 1;
    }
    return -1;
}
