// The keep-alive transport: many calls share a few connections (counted
// at a proxy in front of a real daemon), bodies stay bounded, a signal
// ends a call, and the watch stream reads through it as through fetch.

import assert from "node:assert/strict";
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
  const c = new Client({ urls: px.url, workerId: "ka-1", savingsIntervalMs: 0 });
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

test("the watch stream reads through the keep-alive transport", async () => {
  const c = new Client({ urls: d.url, workerId: "ka-4", savingsIntervalMs: 0, watch: true });
  try {
    await waitFor(() => !c.openCache.degraded, "the watch stream live");
  } finally {
    await c.close();
  }
});
