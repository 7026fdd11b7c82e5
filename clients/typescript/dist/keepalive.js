// A fetch over node:http's keep-alive Agent, and beside it a unary call
// that skips fetch's WHATWG objects. Node's fetch (undici behind the
// WHATWG layers) spends about twice what node:http does on each of
// breakerd's small unary calls (docs/typescript.md#keep-alive), and even
// over node:http a Response and a ReadableStream for each answer cost a
// good part of a call's CPU, so on Node the client sends its unary calls
// through unary, and reads its watch stream through fetch, unless given a
// fetch of its own. The fetch
// does what the transport asks of fetch and no more: a method, headers, a
// string body, a signal, and a Response whose body streams (the watch
// stream reads it as it comes; the transport bounds what it reads).
// Redirects are never followed (node:http follows none): the transport
// refuses a 3xx itself. node:http is loaded through
// process.getBuiltinModule, so the core still imports nothing but the
// platform and a bundle for a browser never pulls it in.
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
/** MAX_SOCKETS bounds the connections to one daemon (calls past it queue in the agent). */
export const MAX_SOCKETS = 64;
/**
 * keepAliveFetch returns a fetch over node:http(s) with keep-alive agents
 * of its own, or undefined where node:http is not at hand (a browser, a
 * runtime without process.getBuiltinModule): the platform's fetch serves
 * there.
 */
export function keepAliveFetch() {
    const proc = globalThis.process;
    if (typeof proc?.getBuiltinModule !== "function")
        return undefined;
    const http = proc.getBuiltinModule("node:http");
    const https = proc.getBuiltinModule("node:https");
    if (!http || !https)
        return undefined;
    const agents = {
        "http:": new http.Agent({ keepAlive: true, maxSockets: MAX_SOCKETS }),
        "https:": new https.Agent({ keepAlive: true, maxSockets: MAX_SOCKETS }),
    };
    const mods = { "http:": http, "https:": https };
    const f = (input, init) => {
        const url = input instanceof URL ? input : new URL(typeof input === "string" ? input : input.url);
        if (url.protocol !== "http:" && url.protocol !== "https:")
            return Promise.reject(new TypeError(`keep-alive fetch: ${url.protocol} is not http(s)`));
        return send(mods[url.protocol], agents[url.protocol], url, init ?? {});
    };
    const u = (url, headers, body, signal, limit) => {
        if (url.protocol !== "http:" && url.protocol !== "https:")
            return Promise.reject(new TypeError(`keep-alive fetch: ${url.protocol} is not http(s)`));
        return unary(mods[url.protocol], agents[url.protocol], url, headers, body, signal, limit);
    };
    return {
        fetch: f,
        unary: u,
        close: () => {
            agents["http:"].destroy();
            agents["https:"].destroy();
        },
    };
}
/** send makes one request and resolves with its answer once the head has come. */
function send(mod, agent, url, init) {
    return new Promise((resolve, reject) => {
        const signal = init.signal ?? undefined;
        if (signal?.aborted)
            return reject(signal.reason);
        const headers = plainHeaders(init.headers);
        if (init.body != null && typeof init.body !== "string")
            return reject(new TypeError("keep-alive fetch: only a string body is sent"));
        const body = typeof init.body === "string" ? new TextEncoder().encode(init.body) : undefined;
        if (body !== undefined)
            headers["content-length"] = String(body.byteLength);
        const req = mod.request(url, { method: init.method ?? "GET", headers, agent });
        const onAbort = () => req.destroy(signal?.reason instanceof Error ? signal.reason : new Error("aborted"));
        signal?.addEventListener("abort", onAbort, { once: true });
        const done = () => signal?.removeEventListener("abort", onAbort);
        req.on("error", (err) => (done(), reject(signal?.aborted ? signal.reason : new TypeError("fetch failed", { cause: err }))));
        req.on("response", (res) => resolve(response(res, signal, done)));
        req.end(body);
    });
}
/**
 * unary makes one request and resolves with its whole answer. The body
 * goes as a string, so node:http writes it with the head in one write.
 */
function unary(mod, agent, url, headers, body, signal, limit) {
    return new Promise((resolve, reject) => {
        if (signal?.aborted)
            return reject(signal.reason);
        // node:http wants an IPv6 literal without its brackets.
        const hostname = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
        const req = mod.request({ protocol: url.protocol, hostname, port: url.port, path: url.pathname, method: "POST",
            headers: { ...headers, "content-length": String(utf8Length(body)) }, agent });
        let settled = false;
        const settle = (err, answer) => {
            if (settled)
                return;
            settled = true;
            if (signal)
                offStop(signal, onAbort);
            if (answer)
                resolve(answer);
            else
                reject(signal?.aborted ? signal.reason : err);
        };
        const onAbort = () => req.destroy(signal?.reason instanceof Error ? signal.reason : new Error("aborted"));
        if (signal)
            onStop(signal, onAbort);
        req.on("error", (err) => settle(new TypeError("fetch failed", { cause: err })));
        req.on("response", (res) => {
            const status = res.statusCode ?? 0;
            const chunks = [];
            let n = 0;
            res.on("data", (chunk) => {
                n += chunk.byteLength;
                if (n > limit) {
                    settle(new BodyTooLarge(limit, status, headerOf(res.headers, "content-type") ?? ""));
                    res.destroy();
                    return;
                }
                chunks.push(chunk);
            });
            res.on("end", () => settle(undefined, { status, header: (name) => headerOf(res.headers, name), text: decodeAll(chunks, n) }));
            res.on("error", (err) => settle(new TypeError("terminated", { cause: err })));
            res.on("close", () => {
                if (!res.complete)
                    settle(new TypeError("terminated"));
            });
        });
        req.end(body);
    });
}
const decoder = new TextDecoder("utf-8");
/** decodeAll decodes chunks, n bytes in all, as UTF-8. */
function decodeAll(chunks, n) {
    if (chunks.length === 1)
        return decoder.decode(chunks[0]);
    const all = new Uint8Array(n);
    let at = 0;
    for (const c of chunks) {
        all.set(c, at);
        at += c.byteLength;
    }
    return decoder.decode(all);
}
/** headerOf is one of node's response headers as fetch's Headers.get gives it. */
function headerOf(h, name) {
    const v = h[name.toLowerCase()];
    return v === undefined ? null : Array.isArray(v) ? v.join(", ") : v;
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
/** response wraps node's answer in a Response whose body streams what arrives. */
function response(res, signal, done) {
    const status = res.statusCode ?? 0;
    const headers = new Headers();
    for (const [k, v] of Object.entries(res.headers)) {
        if (v !== undefined)
            headers.set(k, Array.isArray(v) ? v.join(", ") : v);
    }
    const nobody = status === 204 || status === 304 || status < 200;
    const stream = nobody
        ? null
        : new ReadableStream({
            start(c) {
                res.on("data", (chunk) => c.enqueue(chunk));
                res.on("end", () => (done(), c.close()));
                res.on("error", (err) => (done(), c.error(signal?.aborted ? signal.reason : err)));
                res.on("close", () => {
                    if (!res.complete)
                        (done(), c.error(signal?.aborted ? signal.reason : new TypeError("terminated")));
                });
            },
            cancel() {
                done();
                res.destroy();
            },
        });
    if (nobody) {
        done();
        res.resume();
    }
    return new Response(stream, { status: status < 200 || status > 599 ? 599 : status, headers });
}
/** plainHeaders flattens fetch's header forms into node's. */
function plainHeaders(h) {
    const out = {};
    if (!h)
        return out;
    if (h instanceof Headers) {
        h.forEach((v, k) => (out[k] = v));
    }
    else if (Array.isArray(h)) {
        for (const [k, v] of h)
            out[String(k).toLowerCase()] = String(v);
    }
    else {
        for (const [k, v] of Object.entries(h))
            out[k.toLowerCase()] = String(v);
    }
    return out;
}
