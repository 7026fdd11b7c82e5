// The watch stream that stalls: a daemon (here a server of the test's
// own, announcing a short heartbeat interval) whose stream stays open and
// sends nothing. The client drops it after three silent intervals, marks
// its view degraded meanwhile, reconnects, and a force lifted during the
// stall stops denying. A snapshot in several parts replaces the view
// once, when its last part arrives.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, type BreakerState } from "../src/index.js";
import { Clock, DEAD_URL, serve, waitFor } from "./helpers.js";

const FOREVER = "9223372036854775807";

/** open is the state of breaker b, open for a minute by clock's reading. */
function open(b: string, clock: Clock): BreakerState {
  return { breaker: b, as_of_ms: String(clock.ms), denial: { decision: "DECISION_DENIED_OPEN", status: "circuit_open", reason: "failing", deny_until_ms: String(clock.ms + 60_000) } };
}

function part(states: unknown[], extra: Record<string, unknown>): string {
  return `event: snapshot\ndata: ${JSON.stringify({ states, ...extra })}\n\n`;
}

test("a stalled watch stream is dropped after three silent heartbeat intervals, and reconnected", async (t) => {
  const clock = new Clock();
  let connection = 0;
  let lift: () => void = () => undefined;
  const lifted = new Promise<void>((r) => (lift = r));
  const forced = { breaker: "pinned", as_of_ms: String(clock.ms), denial: { decision: "DECISION_DENIED_FORCED_OPEN", forced: true, status: "forced_open", reason: "maint", deny_until_ms: FOREVER } };
  const srv = await serve((req, res) => {
    if (!req.url?.startsWith("/v1/watch")) return res.end();
    connection++;
    res.writeHead(200, { "content-type": "text/event-stream" });
    if (connection === 1) {
      // The interval as an int64 string (protojson), the view in two parts,
      // then silence with the connection open: a stall.
      res.write(part([forced], { heartbeat_ms: "50", more: true }));
      res.write(part([open("open", clock)], { heartbeat_ms: "50" }));
      return;
    }
    // The force was lifted meanwhile. The fresh view's last part waits
    // until the test has seen the client degraded; a long interval is
    // announced, so the held stream is not dropped too.
    res.write(part([], { heartbeat_ms: 60_000, more: true }));
    void lifted.then(() => res.write(part([], { heartbeat_ms: 60_000 })));
  });
  t.after(() => srv.close());
  const errors: unknown[] = [];
  const c = new Client({ urls: srv.url, workerId: "w", watch: true, clock: clock.now, onError: (e) => errors.push(e) });
  t.after(() => c.close());
  await waitFor(() => c.openCache.status.snapshots >= 1, "the first snapshot");
  assert.ok(c.openCache.lookup("pinned") && c.openCache.lookup("open"), "both parts make the view");
  await waitFor(() => connection >= 2, "the reconnect after the stall");
  assert.equal(c.openCache.stalls, 1, "the silent stream was dropped for its silence");
  assert.ok(errors.some((e) => /nothing heard for 150 ms/.test(String(e))), "the drop is told to onError");
  assert.equal(c.degraded, true, "the view is degraded from the drop until a fresh snapshot");
  lift();
  await waitFor(() => c.openCache.status.snapshots >= 2, "the fresh snapshot");
  assert.equal(c.openCache.lookup("pinned"), undefined, "the lifted force no longer denies");
  assert.equal(c.degraded, false);
});

test("a snapshot in parts replaces the view only when its last part arrives", async (t) => {
  const clock = new Clock();
  let release: () => void = () => undefined;
  const second = new Promise<void>((r) => (release = r));
  const srv = await serve((req, res) => {
    if (!req.url?.startsWith("/v1/watch")) return res.end();
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(part([open("a", clock)], { more: true }));
    void second.then(() => res.write(part([open("b", clock)], { more: false })));
  });
  t.after(() => srv.close());
  const c = new Client({ urls: srv.url, workerId: "w", watch: true, clock: clock.now, watchHeartbeatMs: 60_000 });
  t.after(() => c.close());
  c.openCache.learn(open("old", clock));
  await waitFor(() => srv.hits.get("/v1/watch") === 1, "the stream");
  assert.equal(c.openCache.status.snapshots, 0);
  assert.equal(c.openCache.status.connected, false, "not live before the last part");
  assert.equal(c.degraded, true, "degraded while the stream is not live");
  release();
  await waitFor(() => c.openCache.status.snapshots === 1, "the last part");
  assert.ok(c.openCache.lookup("a") && c.openCache.lookup("b"));
  assert.equal(c.openCache.lookup("old"), undefined, "the complete snapshot replaced the view");
  assert.equal(c.degraded, false);
});

test("while the stream is not live, a denial it no longer hears is answered for a bounded time only", async (t) => {
  const clock = new Clock();
  const srv = await serve((req, res) => {
    if (!req.url?.startsWith("/v1/watch")) return res.end();
    res.writeHead(200, { "content-type": "text/event-stream" }); // never a snapshot
  });
  t.after(() => srv.close());
  const c = new Client({ urls: srv.url, workerId: "w", watch: true, clock: clock.now, watchHeartbeatMs: 60_000 });
  t.after(() => c.close());
  c.openCache.learn({ breaker: "pinned", as_of_ms: String(clock.ms), denial: { decision: "DECISION_DENIED_FORCED_OPEN", forced: true, deny_until_ms: FOREVER } });
  assert.ok(c.openCache.lookup("pinned"));
  clock.advance(60_001);
  assert.equal(c.openCache.lookup("pinned"), undefined, "a view not heard for STALE_VIEW_MS no longer denies");
});

test("a stream that cannot connect, or loses its connection, is told naming its URL and the cause", async (t) => {
  const refused: unknown[] = [];
  const c = new Client({ urls: DEAD_URL, workerId: "w", watch: true, savingsIntervalMs: 0, onError: (e) => refused.push(e) });
  t.after(() => c.close());
  await waitFor(() => refused.some((e) => String(e).includes("/v1/watch")), "the stream's failure told");
  const e = refused.find((e) => String(e).includes("/v1/watch")) as Error;
  assert.match(e.message, /^watch http:\/\/127\.0\.0\.1:2\/v1\/watch: fetch failed: connect ECONNREFUSED 127\.0\.0\.1:2$/);
  assert.ok(e.cause instanceof TypeError, "the failure itself is the cause");

  // A live stream whose server goes away (a daemon that exits).
  const clock = new Clock();
  const srv = await serve((req, res) => {
    if (!req.url?.startsWith("/v1/watch")) return res.end();
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(part([open("a", clock)], {}));
  });
  const lost: unknown[] = [];
  const live = new Client({ urls: srv.url, workerId: "w", watch: true, clock: clock.now, savingsIntervalMs: 0, onError: (e) => lost.push(e) });
  t.after(() => live.close());
  await waitFor(() => live.openCache.status.connected, "the stream live");
  await srv.close();
  await waitFor(() => lost.length > 0, "the lost stream told");
  const l = lost[0] as Error;
  assert.ok(l.message.startsWith(`watch ${srv.url}/v1/watch: `), l.message);
  assert.notEqual(l.cause, undefined, "the cause is kept");
});
