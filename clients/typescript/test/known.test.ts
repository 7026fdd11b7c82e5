// What the client holds as last known denying is what breakerd says
// denies (a state's denial and deny_until_ms), never a state's name: with
// no daemon answering, a breaker held so lets one call of this client out
// at a time, and any other is the local fallback's alone. A server of the
// test's own sends the states; the calls the fallback lets out are the
// witness.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client } from "../src/index.js";
import { json, serve } from "./helpers.js";

const B = "payments";

/** fallbackAllowedAfter is how many of 5 sequential Allows the fallback lets out once the daemon that answered a Record with state is gone. */
async function fallbackAllowedAfter(state: Record<string, unknown>): Promise<number> {
  const daemon = await serve((req, res) => {
    if (req.url?.endsWith("/Allow")) return json(res, 200, { decision: "DECISION_ALLOWED", ticket: { generation: "3" }, state: { breaker: B, generation: "3" } });
    if (req.url?.endsWith("/Record")) return json(res, 200, { counted: false, state: { breaker: B, generation: "3", as_of_ms: "1000", ...state } });
    json(res, 200, {});
  });
  // Budgets a busy host cannot run past: the daemon is gone only once closed.
  const c = new Client({ urls: daemon.url, workerId: "w1", watch: false, savingsIntervalMs: 0, rpcTimeoutMs: 30_000, allowBudgetMs: 30_000, onError: () => undefined });
  try {
    const p = await c.allow(B);
    assert.ok(p.allowed && !p.degraded);
    await c.record(p, { http_status: 503 });
    assert.equal(daemon.hits.get("/breakerd.v1.BreakerService/Record"), 1, "the Record reached the daemon");
    await daemon.close();
    let allowed = 0;
    for (let i = 0; i < 5; i++) {
      const q = await c.allow(B);
      assert.ok(q.degraded, q.decision);
      if (q.allowed) allowed++;
    }
    return allowed;
  } finally {
    await c.close();
    await daemon.close();
  }
}

test("a state named open that breakerd says does not deny (shadow mode) is not held", async () => {
  assert.equal(await fallbackAllowedAfter({ state: "STATE_OPEN", shadow: true, deny_until_ms: "0" }), 5);
});

test("a state breakerd says denies is held, whatever its name", async () => {
  const denial = { decision: "DECISION_DENIED_OPEN", scope: "DENIAL_SCOPE_PARENT", deny_until_ms: "1000", reason: "r" };
  for (const name of ["STATE_CLOSED", "STATE_FORCED_OPEN", "STATE_PAUSED"]) {
    assert.equal(await fallbackAllowedAfter({ state: name, deny_until_ms: "1000", denial }), 1, name);
  }
});
