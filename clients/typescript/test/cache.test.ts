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
          { breaker: "open", as_of_ms: asOf, alternatives: ["alt"], denial: { decision: "DECISION_DENIED_OPEN", status: "circuit_open", reason: "open failing", deny_until_ms: String(clock.ms + 60_000) } },
          { breaker: "pinned", as_of_ms: asOf, denial: { decision: "DECISION_DENIED_FORCED_OPEN", status: "forced_open", forced: true, reason: "maint", deny_until_ms: FOREVER } },
          { breaker: "closed", as_of_ms: asOf, denial: null },
          { breaker: "isolated", as_of_ms: asOf, suspect_worker: "w", suspect_denial: { decision: "DECISION_DENIED_SUSPECT_WORKER", scope: "DENIAL_SCOPE_WORKER", status: "worker_isolated", reason: "this worker's calls fail", deny_until_ms: String(clock.ms + 60_000) } },
          { breaker: "elsewhere", as_of_ms: asOf, suspect_worker: "w2", suspect_denial: { decision: "DECISION_DENIED_SUSPECT_WORKER", scope: "DENIAL_SCOPE_WORKER", deny_until_ms: String(clock.ms + 60_000) } },
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
    json(res, 200, { states: names.map((b) => ({ breaker: b, as_of_ms: String(clock.ms), denial: { decision: "DECISION_DENIED_OPEN", reason: `${b} failing`, deny_until_ms: String(clock.ms + 5_000) } })) });
  });
  t.after(() => srv.close());
  const c = new Client({ urls: [DEAD_URL, srv.url], workerId: "w", watch: true, clock: clock.now });
  t.after(() => c.close());
  await waitFor(() => connection >= 3, "three connections");
  await c.openCache.settled();
  assert.deepEqual(lastIds, ["", "later/5-0", ""], "resumed with the last id, then started over after the resync");
  assert.deepEqual(batchGets, [["later"], ["later"]], "each event read afresh once; the duplicate dropped");
  assert.equal(c.openCache.lookup("open")?.denial.reason, "open failing");
  assert.equal(c.openCache.lookup("closed"), undefined, "a state without a denial does not deny");
  assert.equal(c.openCache.lookup("isolated")?.denial.scope, "worker", "this worker is the suspect: its own denial");
  assert.equal(c.openCache.lookup("elsewhere"), undefined, "another worker's suspect denial is not this worker's");
  assert.deepEqual(c.openCache.lookup("open")?.alternatives, ["alt"]);
  assert.equal(c.openCache.lookup("pinned")?.denial.untilMs, Infinity);
  assert.equal(c.openCache.lookup("pinned")?.denial.forced, true);
  assert.ok(c.openCache.lookup("later"));
  clock.advance(5_000);
  assert.equal(c.openCache.lookup("later"), undefined, "a denial ends at deny_until_ms");
  assert.ok(c.openCache.lookup("open"));
  clock.advance(55_000);
  assert.equal(c.openCache.lookup("open"), undefined);
  assert.ok(c.openCache.lookup("pinned"), "until an operator acts");
});
