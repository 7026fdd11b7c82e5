// What a guarded function threw, read as evidence: real errors from
// fetch, Node, the OpenAI and Anthropic SDKs, and axios's shape.

import assert from "node:assert/strict";
import { createServer as netServer } from "node:net";
import { test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

import { CircuitOpenError, HttpError, MalformedOutputError, evidenceOfError, evidenceOfResponse, localEffect, throwForStatus } from "../src/index.js";
import { DEAD_URL, json, serve, within } from "./helpers.js";

test("fetch's own failures name their kind", async (t) => {
  const reset = netServer((c) => c.destroy());
  await new Promise<void>((r) => reset.listen(0, "127.0.0.1", r));
  t.after(() => reset.close());
  const plain = await serve((_q, res) => res.end("plain http"));
  t.after(() => plain.close());
  const port = (reset.address() as { port: number }).port;
  // Node 20's fetch (undici 6) loads its HTTP parser during the process's
  // first connection and misses that connection's close meanwhile: a reset
  // then would never settle. One answered fetch first loads the parser.
  await within("a plain answer", fetch(plain.url).then((r) => r.text()));

  const cases: [string, () => Promise<unknown>, string][] = [
    ["refused", () => fetch(DEAD_URL), "ERROR_KIND_REFUSED"],
    ["reset", () => fetch(`http://127.0.0.1:${port}/`), "ERROR_KIND_RESET"],
    ["tls", () => fetch(plain.url.replace("http:", "https:")), "ERROR_KIND_TLS"],
    ["timeout", () => fetch(plain.url, { signal: AbortSignal.timeout(0) }), "ERROR_KIND_TIMEOUT"],
  ];
  for (const [name, call, want] of cases) {
    const err = await within(
      `fetch's ${name} error`,
      call().then(
        () => assert.fail(`${name}: no error`),
        (e: unknown) => e,
      ),
    );
    assert.deepEqual(evidenceOfError(err), { error_kind: want }, name);
  }
});

test("DNS failures are dns", () => {
  // Resolving a name needs a resolver this machine may not have: the
  // error is built as Node raises it (getaddrinfo ENOTFOUND under fetch's TypeError).
  const cause = Object.assign(new Error("getaddrinfo ENOTFOUND vendor.invalid"), { code: "ENOTFOUND", syscall: "getaddrinfo" });
  assert.deepEqual(evidenceOfError(new TypeError("fetch failed", { cause })), { error_kind: "ERROR_KIND_DNS" });
});

test("a cancel is never a failure, a timeout is", () => {
  const c = new AbortController();
  c.abort();
  assert.deepEqual(evidenceOfError(c.signal.reason), { error_kind: "ERROR_KIND_CANCELLED" }, "AbortError");
  assert.deepEqual(evidenceOfError(new Error("whatever the tool threw"), { signal: c.signal }), { error_kind: "ERROR_KIND_CANCELLED" }, "aborted signal");
  const t = AbortSignal.abort(new DOMException("late", "TimeoutError"));
  assert.deepEqual(evidenceOfError(new Error("x"), { signal: t }), { error_kind: "ERROR_KIND_TIMEOUT" }, "signal timed out");
});

test("an inner denial is breakerd_denial, a validator's rejection malformed_output, anything else other", () => {
  const inner = new CircuitOpenError({
    breaker: "sub", tool: "sub", decision: "DECISION_DENIED_OPEN", reason: "r", retryAfterMs: 1, alternatives: [],
    scope: "", forced: false, degraded: false, toolResult: "{}",
  });
  assert.deepEqual(evidenceOfError(inner), { error_kind: "ERROR_KIND_BREAKERD_DENIAL" });
  assert.deepEqual(evidenceOfError(new Error("outer", { cause: inner })), { error_kind: "ERROR_KIND_BREAKERD_DENIAL" });
  assert.deepEqual(evidenceOfError(new MalformedOutputError("no id")), { error_kind: "ERROR_KIND_MALFORMED_OUTPUT" });
  assert.deepEqual(evidenceOfError(new RangeError("bug")), { error_kind: "ERROR_KIND_OTHER" });
  assert.deepEqual(evidenceOfError("a string"), { error_kind: "ERROR_KIND_OTHER" });
});

test("a fetch Response gives its status and wait headers", async (t) => {
  const srv = await serve((_q, res) => {
    res.writeHead(429, { "retry-after": "7", "x-ratelimit-reset-tokens": "6m0s", "x-secret": "k", date: "Tue, 01 Dec 2026 10:00:00 GMT" });
    res.end();
  });
  t.after(() => srv.close());
  const res = await within("the 429", fetch(srv.url));
  assert.deepEqual(evidenceOfResponse(res), {
    http_status: 429,
    headers: { "retry-after": "7", "x-ratelimit-reset-tokens": "6m0s" },
    date: "Tue, 01 Dec 2026 10:00:00 GMT",
  });
});

test("the OpenAI SDK's errors, thrown by the real client", async (t) => {
  const srv = await serve((req, res) => {
    if (req.url?.includes("quota")) {
      res.setHeader("date", "Tue, 01 Dec 2026 10:00:00 GMT");
      return json(res, 429, { error: { message: "You exceeded your quota", type: "insufficient_quota", code: "insufficient_quota" } });
    }
    res.setHeader("retry-after-ms", "1500");
    res.setHeader("date", "Tue, 01 Dec 2026 10:00:00 GMT");
    json(res, 503, { error: { message: "overloaded", type: "server_error", code: null } });
  });
  t.after(() => srv.close());
  const quota = new OpenAI({ apiKey: "test", baseURL: `${srv.url}/quota`, maxRetries: 0 });
  const err1 = await within("the quota error", quota.chat.completions.create({ model: "m", messages: [] }).catch((e: unknown) => e));
  assert.ok(err1 instanceof OpenAI.APIError);
  assert.deepEqual(evidenceOfError(err1), { http_status: 429, date: "Tue, 01 Dec 2026 10:00:00 GMT", body_error_code: "insufficient_quota" });

  const down = new OpenAI({ apiKey: "test", baseURL: srv.url, maxRetries: 0 });
  const err2 = await within("the 503", down.chat.completions.create({ model: "m", messages: [] }).catch((e: unknown) => e));
  assert.deepEqual(evidenceOfError(err2), {
    http_status: 503,
    headers: { "retry-after-ms": "1500" },
    date: "Tue, 01 Dec 2026 10:00:00 GMT",
    body_error_code: "server_error",
  });

  const dead = new OpenAI({ apiKey: "test", baseURL: DEAD_URL, maxRetries: 0 });
  const err3 = await within("the refused connection's error", dead.chat.completions.create({ model: "m", messages: [] }).catch((e: unknown) => e));
  assert.ok(err3 instanceof OpenAI.APIConnectionError, String(err3));
  assert.deepEqual(evidenceOfError(err3), { error_kind: "ERROR_KIND_REFUSED" });

  const slow = await serve(() => undefined); // never answers
  t.after(() => slow.close());
  const late = new OpenAI({ apiKey: "test", baseURL: slow.url, maxRetries: 0, timeout: 1 });
  const err4 = await within("the SDK's timeout", late.chat.completions.create({ model: "m", messages: [] }).catch((e: unknown) => e));
  assert.ok(err4 instanceof OpenAI.APIConnectionTimeoutError, String(err4));
  assert.deepEqual(evidenceOfError(err4), { error_kind: "ERROR_KIND_TIMEOUT" });

  const c = new AbortController();
  const p = late.chat.completions.create({ model: "m", messages: [] }, { signal: c.signal, timeout: 60_000 }).catch((e: unknown) => e);
  c.abort();
  const err5 = await within("the SDK's abort", p);
  assert.ok(err5 instanceof OpenAI.APIUserAbortError, String(err5));
  assert.deepEqual(evidenceOfError(err5), { error_kind: "ERROR_KIND_CANCELLED" });
});

test("the Anthropic SDK's errors, thrown by the real client", async (t) => {
  const srv = await serve((_req, res) => {
    res.setHeader("retry-after", "30");
    res.setHeader("anthropic-ratelimit-requests-reset", "2026-12-01T10:00:30Z");
    json(res, 429, { type: "error", error: { type: "rate_limit_error", message: "slow down" } });
  });
  t.after(() => srv.close());
  const a = new Anthropic({ apiKey: "test", baseURL: srv.url, maxRetries: 0 });
  const err = await within("the 429", a.messages.create({ model: "m", max_tokens: 1, messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e));
  assert.ok(err instanceof Anthropic.APIError, String(err));
  const ev = evidenceOfError(err);
  delete ev.date; // the test server's own Date
  assert.deepEqual(ev, {
    http_status: 429,
    headers: { "retry-after": "30", "anthropic-ratelimit-requests-reset": "2026-12-01T10:00:30Z" },
    body_error_code: "rate_limit_error",
  });
});

test("axios-style errors: response.status, response.headers, response.data", () => {
  const err = Object.assign(new Error("Request failed with status code 502"), {
    isAxiosError: true,
    code: "ERR_BAD_RESPONSE",
    response: { status: 502, headers: { "Retry-After": "3", "content-type": "text/html" }, data: "<html>bad gateway</html>" },
  });
  assert.deepEqual(evidenceOfError(err), { http_status: 502, headers: { "retry-after": "3" } });
  const canceled = Object.assign(new Error("canceled"), { name: "CanceledError", code: "ERR_CANCELED" });
  assert.deepEqual(evidenceOfError(canceled), { error_kind: "ERROR_KIND_CANCELLED" });
  const timedOut = Object.assign(new Error("timeout of 10ms exceeded"), { code: "ECONNABORTED" });
  assert.deepEqual(evidenceOfError(timedOut), { error_kind: "ERROR_KIND_TIMEOUT" });
});

test("HttpError and throwForStatus keep the status, the wait headers and the body's code", async (t) => {
  const srv = await serve((req, res) => {
    if (req.url === "/ok") return json(res, 200, { ok: true });
    res.writeHead(429, { "content-type": "application/json", "retry-after": "2", "x-secret": "k" });
    res.end('{"error":{"code":"insufficient_quota"}}');
  });
  t.after(() => srv.close());
  const ok = await within("the 200", fetch(`${srv.url}/ok`));
  assert.equal(await throwForStatus(ok), ok, "a status below 400 is returned as it is");
  const err = await within("the 429", fetch(`${srv.url}/quota`).then(throwForStatus).catch((e: unknown) => e));
  assert.ok(err instanceof HttpError, String(err));
  assert.equal(err.status, 429);
  assert.match(err.message, /^HTTP 429 from http:\/\/127\.0\.0\.1:\d+\/quota$/);
  const ev = evidenceOfError(err);
  delete ev.date;
  assert.deepEqual(ev, { http_status: 429, headers: { "retry-after": "2" }, body_error_code: "insufficient_quota" });
  assert.deepEqual(evidenceOfError(new HttpError(503)), { http_status: 503 });
  assert.deepEqual(evidenceOfError(new Error("refund failed", { cause: new HttpError(502) })), { http_status: 502 }, "an HttpError as the cause");
  assert.throws(() => new HttpError(42), /HttpError: status must be an integer from 100 to 599, got 42/);
});

test("an error no one can name is other, whatever its message says, and the fallback does not count it", () => {
  for (const err of [new Error("HTTP 400"), new Error("HTTP 503"), new TypeError("x is undefined"), new TypeError("fetch failed")]) {
    const ev = evidenceOfError(err);
    assert.deepEqual(ev, { error_kind: "ERROR_KIND_OTHER" }, err.message);
    assert.equal(localEffect(ev), "none", err.message);
  }
});
