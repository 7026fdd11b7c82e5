// The open cache against an event stream of the test's own: the
// snapshot, events read afresh, duplicates dropped, resume with
// Last-Event-ID on the next daemon, and resync.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client } from "../src/index.js";
import { Clock, DEAD_URL, json, serve, waitFor } from "./helpers.js";

const FOREVER = "9223372036854775807";

test("the open cache: snapshot, events read afresh, duplicates dropped, resume and resync", async (t) => {
  const clock = new Clock();
  const lastIds: string[] = [];
  const batchGets: string[][] = [];
  let connection = 0;
  const srv = await serve((req, res, body) => {
    if (req.url?.startsWith("/v1/watch")) {
      connection++;
      lastIds.push(String(req.headers["last-event-id"] ?? ""));
      res.writeHead(200, { "content-type": "text/event-stream" });
      const asOf = String(clock.ms);
      if (connection === 1) {
        res.write(`event: snapshot\ndata: ${JSON.stringify({ states: [
          { breaker: "open", state: "STATE_OPEN", reason: "open failing", deny_until_ms: String(clock.ms + 60_000), as_of_ms: asOf, alternatives: ["alt"] },
          { breaker: "pinned", state: "STATE_FORCED_OPEN", forced_by: "ops", reason: "maint", deny_until_ms: FOREVER, as_of_ms: asOf },
        ] })}\n\n`);
        res.write(`id: later/5-0\nevent: event\ndata: {"breaker":"later","kind":"EVENT_KIND_TRANSITION"}\n\n`);
        res.write(`id: later/5-0\nevent: event\ndata: {"breaker":"later","kind":"EVENT_KIND_TRANSITION"}\n\n`); // a duplicate
        return res.end(": the daemon goes away\n\n");
      }
      if (connection === 2) {
        res.write(`id: later/6-0\nevent: event\ndata: {"breaker":"later"}\n\n`);
        return res.end(`event: resync\ndata: {"reason":"lost"}\n\n`);
      }
      return; // the third connection stays open
    }
    const names = (JSON.parse(body) as { breakers: string[] }).breakers;
    batchGets.push(names);
    json(res, 200, { states: names.map((b) => ({ breaker: b, state: "STATE_OPEN", reason: `${b} failing`, deny_until_ms: String(clock.ms + 5_000), as_of_ms: String(clock.ms) })) });
  });
  t.after(() => srv.close());
  const c = new Client({ urls: [DEAD_URL, srv.url], workerId: "w", watch: true, clock: clock.now });
  t.after(() => c.close());
  await waitFor(() => connection >= 3, "three connections");
  await c.openCache.settled();
  assert.deepEqual(lastIds, ["", "later/5-0", ""], "resumed with the last id, then started over after the resync");
  assert.deepEqual(batchGets, [["later"], ["later"]], "each event read afresh once; the duplicate dropped");
  assert.equal(c.openCache.lookup("open")?.reason, "open failing");
  assert.deepEqual(c.openCache.lookup("open")?.alternatives, ["alt"]);
  assert.equal(c.openCache.lookup("pinned")?.untilMs, Infinity);
  assert.equal(c.openCache.lookup("pinned")?.forced, true);
  assert.ok(c.openCache.lookup("later"));
  clock.advance(5_000);
  assert.equal(c.openCache.lookup("later"), undefined, "a denial ends at deny_until_ms");
  assert.ok(c.openCache.lookup("open"));
  clock.advance(55_000);
  assert.equal(c.openCache.lookup("open"), undefined);
  assert.ok(c.openCache.lookup("pinned"), "until an operator acts");
});
