// The keep-alive transport: many calls share a few connections (counted
// at a proxy in front of a real daemon), concurrent calls are outstanding
// at the daemon together, bodies stay bounded, a signal ends a call and
// keeps no listener after it, and the watch stream reads through it as
// through fetch.

import assert from "node:assert/strict";
import { getEventListeners } from "node:events";
import { after, before, test } from "node:test";

import { Client } from "../src/index.js";
import { keepAliveFetch } from "../src/keepalive.js";
import { MAX_BODY_BYTES } from "../src/transport.js";
import { startDaemon, uniq, type Daemon } from "./daemon.js";
import { json, serve, waitFor } from "./helpers.js";
import { Proxy } from "./proxy.js";

let d: Daemon;
before(async () => {
  d = await startDaemon();
});
after(async () => {
  await d?.stop();
});

test("a client's calls share its keep-alive connections", async () => {
  const px = await Proxy.start(d.url);
  // Budgets far above a busy host's answers: every call goes to the daemon.
  const c = new Client({ urls: px.url, workerId: "ka-1", savingsIntervalMs: 0, allowBudgetMs: 60_000, rpcTimeoutMs: 60_000 });
  try {
    const b = uniq();
    await c.allow(b); // first contact (it may ask more than the Allow)
    const first = px.requests;
    for (let i = 0; i < 50; i++) await c.allow(b);
    await Promise.all(Array.from({ length: 8 }, () => c.allow(b)));
    assert.ok(px.requests - first >= 58, `${px.requests - first} requests for 58 calls`);
    // One connection for the sequential calls, at most one more per concurrent caller.
    assert.ok(px.connections <= 8, `${px.connections} connections for 58 calls`);
  } finally {
    await c.close();
    await px.close();
  }
});

test("concurrent calls are outstanding at the daemon together, each on a kept-alive connection", async () => {
  const px = await Proxy.start(d.url);
  // Budgets far above the hold below: every answer is the daemon's.
  const c = new Client({ urls: px.url, workerId: "ka-5", savingsIntervalMs: 0, allowBudgetMs: 60_000, rpcTimeoutMs: 60_000 });
  const N = 16;
  try {
    const b = uniq();
    await c.record(await c.allow(b), {}); // first contact, and the breaker's policy asked for
    await waitFor(() => px.outstanding === 0, "the first calls answered");
    let conns = 0;
    for (let round = 0; round < 2; round++) {
      px.hold();
      const sent = px.requests;
      const calls = Promise.all(Array.from({ length: N }, () => c.allow(b)));
      // Calls that waited for one another would never be outstanding together.
      await waitFor(() => px.outstanding === N, `${N} Allows outstanding at the daemon together`);
      px.restore();
      const permits = await calls;
      assert.ok(permits.every((p) => p.allowed && !p.degraded), "an Allow was not the daemon's ALLOWED");
      assert.equal(px.requests - sent, N, "requests for N Allows");
      if (round === 0) conns = px.connections;
    }
    // One connection per call at most (and the first calls' two), every one kept for the next round.
    assert.ok(conns <= N + 2, `${conns} connections for ${N} concurrent calls`);
    assert.equal(px.connections, conns, "the second round opened connections");
    assert.equal(px.maxOutstanding, N);
  } finally {
    px.restore();
    await c.close();
    await px.close();
  }
});

test("close(): calls still out are answered as when no daemon answers, and a call after it opens a connection anew", async () => {
  const px = await Proxy.start(d.url);
  const c = new Client({ urls: px.url, workerId: "ka-7", savingsIntervalMs: 0, allowBudgetMs: 60_000, rpcTimeoutMs: 60_000, onError: () => undefined });
  const N = 16;
  try {
    const b = uniq();
    const p = await c.allow(b); // first contact, and the breaker's policy asked for
    await waitFor(() => px.outstanding === 0, "the first calls answered");
    px.hold();
    const allows = Promise.all(Array.from({ length: N }, () => c.allow(b)));
    const record = c.record(p, {});
    await waitFor(() => px.outstanding === N + 1, `${N} Allows and a Record outstanding at the daemon`);
    await c.close();
    const permits = await allows;
    assert.ok(permits.every((q) => q.decision === "DECISION_ALLOWED" && q.degraded && q.local), "an Allow out at close() was not the fallback's");
    assert.equal((await record).degraded, true, "the Record out at close() was not the local breaker's");
    px.restore();
    const next = await c.allow(b);
    assert.equal(next.degraded, false, "the Allow after close() was not the daemon's");
  } finally {
    px.restore();
    await c.close();
    await px.close();
  }
});

test("a caller's signal keeps no listener after its calls", async () => {
  const c = new Client({ urls: d.url, workerId: "ka-6", savingsIntervalMs: 0 });
  const ctl = new AbortController();
  try {
    const b = uniq();
    for (let i = 0; i < 20; i++) await c.record(await c.allow(b, { signal: ctl.signal }), {}, { signal: ctl.signal });
    assert.equal(getEventListeners(ctl.signal, "abort").length, 0);
  } finally {
    await c.close();
  }
});

test("on Node, the client sends through node:http, not the platform's fetch", async () => {
  const platform = globalThis.fetch;
  let calls = 0;
  globalThis.fetch = (i, init) => (calls++, platform(i, init));
  const c = new Client({ urls: d.url, workerId: "ka-0", savingsIntervalMs: 0 });
  try {
    for (let i = 0; i < 5; i++) await c.allow(uniq());
    assert.equal(calls, 0, "the platform's fetch sent the calls");
  } finally {
    globalThis.fetch = platform;
    await c.close();
  }
});

test("the platform's fetch, when given, is the one used", async () => {
  let calls = 0;
  const c = new Client({ urls: d.url, workerId: "ka-2", savingsIntervalMs: 0, fetch: (i, init) => (calls++, fetch(i, init)) });
  try {
    await c.allow(uniq());
    assert.ok(calls >= 1, "the given fetch was not called");
  } finally {
    await c.close();
  }
});

test("an answer over the body bound is refused, typed", async () => {
  const s = await serve((_req, res) => json(res, 200, { pad: "x".repeat(MAX_BODY_BYTES) }));
  const c = new Client({ urls: s.url, workerId: "ka-3", savingsIntervalMs: 0, onError: () => undefined });
  try {
    await assert.rejects(c.check(), /over 4194304 bytes/);
  } finally {
    await c.close();
    await s.close();
  }
});

test("a signal ends a call in flight", async () => {
  const s = await serve(() => undefined); // never answers
  const ka = keepAliveFetch()!;
  try {
    const ctl = new AbortController();
    const p = ka.fetch(s.url, { method: "POST", body: "{}", signal: ctl.signal });
    ctl.abort(new Error("caller gave up"));
    await assert.rejects(p, /caller gave up/);
  } finally {
    ka.close();
    await s.close();
  }
});

test("a signal ends a unary call in flight", async () => {
  const s = await serve(() => undefined); // never answers
  const ka = keepAliveFetch()!;
  try {
    const ctl = new AbortController();
    const p = ka.unary(new URL(s.url), {}, "{}", ctl.signal, MAX_BODY_BYTES);
    ctl.abort(new Error("caller gave up"));
    await assert.rejects(p, /caller gave up/);
    assert.equal(getEventListeners(ctl.signal, "abort").length, 0);
  } finally {
    ka.close();
    await s.close();
  }
});

test("a unary call's answer comes whole, its length in UTF-8 bytes", async () => {
  const s = await serve((req, res, body) => json(res, 200, { echo: body, length: req.headers["content-length"] }));
  const ka = keepAliveFetch()!;
  try {
    const sent = JSON.stringify({ breaker: "é€😀".repeat(3) + "x".repeat(70_000) });
    const a = await ka.unary(new URL(s.url), { "content-type": "application/json" }, sent, undefined, MAX_BODY_BYTES);
    assert.equal(a.status, 200);
    assert.match(a.header("Content-Type") ?? "", /^application\/json/);
    assert.equal(a.header("x-absent"), null);
    const got = JSON.parse(a.text) as { echo: string; length: string };
    assert.equal(got.echo, sent);
    assert.equal(got.length, String(new TextEncoder().encode(sent).byteLength));
  } finally {
    ka.close();
    await s.close();
  }
});

test("the watch stream reads through the keep-alive transport", async () => {
  const c = new Client({ urls: d.url, workerId: "ka-4", savingsIntervalMs: 0, watch: true });
  try {
    await waitFor(() => !c.openCache.degraded, "the watch stream live");
  } finally {
    await c.close();
  }
});
