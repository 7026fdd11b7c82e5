// Security: what a hostile or broken server reached as a daemon URL can
// make the client do. Nothing is sent on to where a redirect points, and
// no answer or stream can grow the process past its bounds.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, ProtocolError, type Permit } from "../src/index.js";
import { MAX_BODY_BYTES } from "../src/transport.js";
import { MAX_SSE_LINE_CHARS } from "../src/sse.js";
import { serve, waitFor } from "./helpers.js";

/** N8: a 307 from the daemon's URL would re-POST the breaker, worker id and message to another origin. */
test("SecurityRedirectsAreRefusedNotFollowed", async (t) => {
  const elsewhere = await serve((_req, res) => res.end("{}"));
  t.after(() => elsewhere.close());
  const srv = await serve((_req, res) => {
    res.writeHead(307, { location: `${elsewhere.url}/steal` });
    res.end();
  });
  t.after(() => srv.close());
  const c = new Client({ urls: srv.url, workerId: "w", firstContactBudgetMs: 60_000, allowBudgetMs: 60_000, rpcTimeoutMs: 60_000 });
  t.after(() => c.close());
  await assert.rejects(c.allow("payments"), (e: unknown) => e instanceof ProtocolError && /redirect/.test(e.message));
  const p: Permit = { breaker: "payments", tool: "t", decision: "DECISION_ALLOWED", allowed: true, ticket: {}, retryAfterMs: 0, reason: "", state: undefined, degraded: false, scope: "", alternatives: [], toolResult: "", denial: undefined, local: undefined };
  await assert.rejects(c.record(p, { http_status: 500 }), ProtocolError);
  assert.equal(elsewhere.hits.size, 0, "nothing reached the other origin");
});

/** N7: an answer that never ends is cut at MAX_BODY_BYTES, not read whole. */
test("SecurityAnAnswerIsReadUpToItsBoundOnly", async (t) => {
  let written = 0;
  let closed = false;
  const chunk = Buffer.alloc(64 << 10, 0x61);
  const srv = await serve((_req, res) => {
    res.writeHead(200, { "content-type": "application/json" });
    const more = () => {
      while (!closed && res.write(chunk)) written += chunk.length;
      if (!closed) res.once("drain", () => ((written += chunk.length), more()));
    };
    res.on("close", () => (closed = true));
    more();
  });
  t.after(() => srv.close());
  const c = new Client({ urls: srv.url, workerId: "w", rpcTimeoutMs: 60_000 });
  t.after(() => c.close());
  await assert.rejects(c.get("payments"), (e: unknown) => e instanceof ProtocolError && /over 4194304 bytes/.test(e.message));
  await waitFor(() => closed, "the connection closed by the client");
  assert.ok(written < 4 * MAX_BODY_BYTES, `the server wrote ${written} bytes before the client hung up`);
});

/** N7: an SSE line that never ends drops the stream at its bound; the stream reconnects. */
test("SecurityAWatchLineIsBounded", async (t) => {
  let streams = 0;
  const chunk = "x".repeat(64 << 10);
  const srv = await serve((req, res) => {
    if (!req.url?.startsWith("/v1/watch")) return res.end();
    streams++;
    res.writeHead(200, { "content-type": "text/event-stream" });
    let closed = false;
    res.on("close", () => (closed = true));
    res.write("data: ");
    const more = () => {
      while (!closed && res.write(chunk));
      if (!closed) res.once("drain", more);
    };
    more();
  });
  t.after(() => srv.close());
  const errors: unknown[] = [];
  const c = new Client({ urls: srv.url, workerId: "w", watch: true, onError: (e) => errors.push(e) });
  t.after(() => c.close());
  await waitFor(() => streams >= 2, "the reconnect after the dropped stream");
  assert.ok(errors.some((e) => String(e).includes(`a line over ${MAX_SSE_LINE_CHARS} characters`)), String(errors[0]));
});
