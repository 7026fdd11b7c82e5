// A fetch over node:http's keep-alive Agent, and beside it a unary call
// that skips both fetch's WHATWG objects and node:http's (unary.ts): on
// each of breakerd's small calls, each layer costs the client CPU
// (docs/typescript.md#keep-alive). On Node the client sends its unary
// calls through unary, and reads its watch stream through fetch, unless
// given a fetch of its own. The fetch does what the transport asks of
// fetch and no more: a method, headers, a string body, a signal, and a
// Response whose body streams (the watch stream reads it as it comes; the
// transport bounds what it reads). Redirects are never followed
// (node:http follows none): the transport refuses a 3xx itself. node:http
// is loaded through process.getBuiltinModule, so the core still imports
// nothing but the platform and a bundle for a browser never pulls it in.
import { builtin, MAX_SOCKETS, socketUnary } from "./unary.js";
/**
 * keepAliveFetch returns a fetch over node:http(s) with keep-alive agents
 * of its own, and the unary sender, or undefined where Node's modules are
 * not at hand (a browser, a runtime without process.getBuiltinModule):
 * the platform's fetch serves there.
 */
export function keepAliveFetch() {
    const http = builtin("node:http");
    const https = builtin("node:https");
    const sockets = socketUnary();
    if (!http || !https || !sockets)
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
    return {
        fetch: f,
        unary: sockets.unary,
        close: () => {
            sockets.close();
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
/** headerOf is one of node's response headers as fetch's Headers.get gives it. */
function headerOf(h, name) {
    const v = h[name.toLowerCase()];
    return v === undefined ? null : Array.isArray(v) ? v.join(", ") : v;
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
