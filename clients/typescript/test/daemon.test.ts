// The client against real daemons built from this repository: decisions
// and the daemon's tool_result, raw evidence classified by the daemon,
// GetPolicy, a refused tool name and a bad token, failover between two
// daemons on one Redis, and the open cache fed by the event stream
// answering while no daemon does.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import {
  APIError,
  AuthError,
  CircuitOpenError,
  Client,
  EXCLUDED_OUTCOME,
  HttpError,
  Run,
  renderToolResult,
  storeDenial,
  throwForStatus,
  type Evidence,
  type Permit,
} from "../src/index.js";
import { startDaemon, uniq, type Daemon } from "./daemon.js";
import { conformanceDir, serve, waitFor, within } from "./helpers.js";
import { Proxy } from "./proxy.js";

const prefix = uniq();
const policy = `breakers:
  - match: "${prefix}*"
    threshold: 2
    min_workers: 2
    cooldown_base: 10m
    alternatives: [issue_refund_manually]
`;
let a: Daemon;
let b: Daemon;

before(async () => {
  [a, b] = await Promise.all([startDaemon({ policy }), startDaemon({ policy })]);
});
after(async () => {
  await Promise.all([a?.stop(), b?.stop()]);
});

const client = (worker: string, urls: string[] = [a.url], extra: object = {}) =>
  new Client({ urls, workerId: worker, allowBudgetMs: 5000, ...extra });

/** tripped fails one call from each of two workers: the quorum opens the breaker (threshold 2). */
async function tripped(breaker: string): Promise<void> {
  for (const w of ["trip-w1", "trip-w2"]) {
    const down = () => Promise.reject(Object.assign(new Error("vendor down"), { status: 503, headers: new Headers() }));
    await assert.rejects(client(w).guard(breaker, down), /vendor down/);
  }
  assert.equal((await client("trip-w1").allow(breaker)).decision, "DECISION_DENIED_OPEN");
}

test("two workers' raw evidence trips the breaker; the denial carries the daemon's tool_result, byte-identical to ours", async () => {
  const breaker = `${prefix}:payments`;
  const w1 = client("w1");
  const w2 = client("w2");
  const fail = () => Promise.reject(Object.assign(new Error("HTTP 503"), { status: 503, headers: new Headers({ "retry-after": "1" }) }));
  await assert.rejects(w1.guard(breaker, fail), /HTTP 503/);
  assert.equal((await w1.allow(breaker)).allowed, true, "one worker's failure does not trip");
  const p = await w2.allow(breaker, { tool: "refund_charge" });
  const rec = await w2.record(p, { http_status: 503 });
  assert.equal(rec.classifiedAs, "OUTCOME_SERVER_ERROR");
  assert.equal(rec.counted, true);
  const denied = await w1.allow(breaker, { tool: "refund_charge" });
  assert.equal(denied.decision, "DECISION_DENIED_OPEN");
  assert.equal(denied.degraded, false);
  assert.ok(denied.retryAfterMs > 0);
  const err = await w1.guard(breaker, () => assert.fail("the call went out"), { tool: "refund_charge" }).catch((e: unknown) => e);
  assert.ok(err instanceof CircuitOpenError);
  const parsed = JSON.parse(err.toolResult) as Record<string, unknown>;
  assert.equal(parsed["status"], "circuit_open");
  assert.equal(parsed["tool"], "refund_charge");
  assert.deepEqual(parsed["alternatives"], ["issue_refund_manually"]);
  // The daemon's denial renders the same bytes here as in the daemon, at
  // the daemon's clock when it answered (the state's as_of_ms).
  const at = Number(denied.state?.as_of_ms);
  assert.ok(denied.denial, "the daemon sent its denial");
  assert.equal(
    renderToolResult({ tool: "refund_charge", denial: storeDenial(denied.state?.denial, at, at)!, alternatives: denied.alternatives, degraded: false }, at),
    denied.toolResult,
  );
  const st = await w1.get(breaker);
  assert.equal(st.state, "STATE_OPEN");
  assert.ok(Number(st.deny_until_ms) > Number(st.as_of_ms));
});

test("a cancelled call and an inner breakerd denial are never counted", async () => {
  const breaker = `${prefix}:never`;
  for (const w of ["n1", "n2", "n3"]) {
    const c = client(w);
    const ctl = new AbortController();
    ctl.abort();
    await assert.rejects(c.guard(breaker, () => Promise.reject(ctl.signal.reason), { signal: ctl.signal }));
    const inner = new CircuitOpenError({ breaker: "sub", tool: "sub", decision: "DECISION_DENIED_OPEN", reason: "", retryAfterMs: 0, alternatives: [], scope: "", forced: false, degraded: false, toolResult: "" });
    await assert.rejects(c.guard(breaker, () => Promise.reject(inner)), CircuitOpenError);
    const p = await c.allow(breaker);
    const r = await c.record(p, { error_kind: "ERROR_KIND_BREAKERD_DENIAL" });
    assert.equal(r.classifiedAs, "OUTCOME_CANCELED");
  }
  const st = await client("n1").get(breaker);
  assert.equal(st.state ?? "STATE_CLOSED", "STATE_CLOSED");
  assert.equal(Number(st.failures ?? 0), 0);
});

test("getPolicy answers the policy's values; a refused tool name and a bad token are typed errors", async () => {
  const c = client("p1");
  const pol = await c.getPolicy(`${prefix}:payments`);
  assert.equal(pol.threshold, 2);
  assert.equal(pol.min_workers, 2);
  assert.equal(pol.cooldown_base_ms, "600000");
  await assert.rejects(c.allow(`${prefix}:x`, { tool: "bad tool name!" }), (e: unknown) => e instanceof APIError && e.code === "invalid_argument" && e.violations.some((v) => v.field === "tool"));
  const guarded = await startDaemon({ embedded: true, tokens: "tokens:\n  - name: pool\n    role: worker\n    token: s3cret-token-value-1234567890\n    workers: [p1]\n" }).catch((e: Error) => e);
  if (guarded instanceof Error) throw guarded;
  try {
    await assert.rejects(client("p1", [guarded.url]).allow("x"), (e: unknown) => e instanceof AuthError && e.status === 401);
    await assert.rejects(client("p1", [guarded.url], { token: "wrong-token-wrong-token-wrong" }).allow("x"), (e: unknown) => e instanceof AuthError);
    const ok = await client("p1", [guarded.url], { token: "s3cret-token-value-1234567890" }).allow("x");
    assert.equal(ok.allowed, true);
  } finally {
    await guarded.stop();
  }
});

test("the fallback follows the breaker's policy, which came with the client's first Allow of it: no GetPolicy", async () => {
  const px = await Proxy.start(a.url);
  const sent: string[] = [];
  const counting: typeof fetch = (input, init) => {
    const asked = typeof init?.body === "string" && (JSON.parse(init.body) as { with_policy?: boolean }).with_policy;
    sent.push(String(input).split("/").pop() + (asked ? " with_policy" : ""));
    return fetch(input, init);
  };
  const c = new Client({ urls: px.url, workerId: "w1", fetch: counting, allowBudgetMs: 5000, onError: () => undefined });
  const breaker = `${prefix}:fallback-policy`;
  try {
    for (let i = 0; i < 2; i++) assert.equal((await c.allow(breaker)).degraded, false);
    assert.deepEqual(sent, ["Allow with_policy", "Allow"], "the policy came with the first Allow, and no GetPolicy was sent");
    await px.close(); // no daemon answers from here on
    for (let i = 0; i < 2; i++) {
      const p = await c.allow(breaker);
      assert.ok(p.allowed && p.degraded, "the fallback lets the call through");
      await c.record(p, { http_status: 503 });
    }
    const p = await c.allow(breaker);
    assert.ok(!p.allowed && p.degraded, "the fallback opened at the policy's threshold (2), not at its own default (5)");
  } finally {
    await c.close();
  }
});

test("failover: one of two daemons killed, the other answers within the budget with the fleet's state", async () => {
  const breaker = `${prefix}:failover`;
  const extra = await startDaemon({ policy });
  const c = client("f1", [extra.url, a.url]);
  assert.equal((await c.allow(breaker)).degraded, false);
  await tripped(breaker);
  await extra.kill();
  const p: Permit = await c.allow(breaker);
  assert.equal(p.degraded, false, "the other daemon answered");
  assert.equal(p.decision, "DECISION_DENIED_OPEN");
});

test("a proxy's 502/503/504 page is that daemon away: the next daemon answers, or the fallback", async (t) => {
  for (const status of [502, 503, 504]) {
    const gateway = await serve((_req, res) => {
      res.writeHead(status, { "content-type": "text/html" });
      res.end("<html><body><h1>Bad Gateway</h1>nginx</body></html>");
    });
    t.after(() => gateway.close());
    const c = client("g1", [gateway.url, a.url], { onError: () => undefined });
    const p = await c.allow(`${prefix}:gateway`);
    assert.equal(p.degraded, false, `${status}: the daemon beside the proxy answers`);
    assert.equal([...gateway.hits.values()].reduce((x, y) => x + y, 0), 1);
    await c.close();
    const alone = client("g1", [gateway.url], { onError: () => undefined });
    const q = await alone.allow(`${prefix}:gateway`);
    assert.ok(q.allowed && q.degraded, `${status}: no daemon answers, the fallback does`);
    await alone.close();
  }
});

test("the open cache follows the event stream and keeps denying while no daemon answers", async () => {
  const breaker = `${prefix}:watched`;
  const own = await startDaemon({ policy });
  let allows = 0;
  const counting: typeof fetch = (input, init) => {
    if (String(input).endsWith("/Allow")) allows++;
    return fetch(input, init);
  };
  const c = client("c1", [own.url], { watch: true, allowBudgetMs: 200, fetch: counting });
  try {
    await waitFor(() => c.openCache.status.snapshots > 0, "the stream's snapshot");
    await tripped(breaker); // through daemon a: the event reaches c through its own daemon's stream
    await waitFor(() => c.openCache.lookup(breaker) !== undefined, "the trip's event in the cache");
    // A live stream's cache answers the denial: no Allow reaches a daemon.
    const live = await c.allow(breaker, { tool: "refund_charge" });
    assert.equal(live.decision, "DECISION_DENIED_OPEN");
    assert.equal(live.degraded, false);
    assert.equal("degraded" in (JSON.parse(live.toolResult) as Record<string, unknown>), false, "the tool_result says degraded");
    assert.equal(allows, 0, "Allow requests sent for a breaker the live cache knows open");
    await own.kill();
    await waitFor(() => !c.openCache.status.connected, "the stream's end");
    const p = await c.allow(breaker, { tool: "refund_charge" });
    assert.equal(p.degraded, true);
    assert.equal(p.decision, "DECISION_DENIED_OPEN");
    const denial = JSON.parse(p.toolResult) as Record<string, unknown>;
    assert.equal(denial["degraded"], true);
    assert.equal(denial["tool"], "refund_charge");
    // A breaker the cache knows nothing of: the local fallback allows.
    assert.equal((await c.allow(`${prefix}:unknown`)).allowed, true);
  } finally {
    await c.close();
    await own.stop();
  }
});

test("Run: a tripped tool leaves the run for good, the notice says why", async () => {
  const breaker = `${prefix}:run`;
  await tripped(breaker);
  const run = new Run(client("r1"));
  const tools = [{ name: "web_search", breaker: `${prefix}:search` }, { name: "refund_charge", breaker }, { name: "refund_status", breaker }];
  assert.deepEqual((await run.available(tools)).map((t) => t.name), ["web_search"]);
  assert.deepEqual(run.degraded.map((u) => u.tool), ["refund_charge", "refund_status"]);
  assert.match(run.notice(), /- refund_charge: .*Instead you can use: issue_refund_manually\./);
  const res = await within("the daemon's Force", fetch(`${a.url}/breakerd.v1.BreakerService/Force`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ breaker, mode: "FORCE_MODE_AUTO", reason: "fixed", operator: "test" }),
  }));
  assert.equal(res.status, 200, await res.text());
  assert.equal((await client("r1").allow(breaker)).allowed, true, "the fleet is closed again");
  assert.deepEqual((await run.available(tools)).map((t) => t.name), ["web_search"], "sticky in the run");
  await assert.rejects(run.guard(tools[1]!, () => "x"), CircuitOpenError);
});

interface ClassificationRow {
  name: string;
  evidence: Evidence;
  deadline_ms?: number;
  bare_rate_limit_wait_ms?: number;
  count_unrecognised?: boolean;
  want: { outcome: string; why: string; counts: boolean };
}

/** clockBound: a row whose answer depends on the classifier's clock (a wait given as a date with no Date to read it against). */
function clockBound(r: ClassificationRow): boolean {
  if (r.evidence.date) return false;
  return Object.entries(r.evidence.headers ?? {}).some(([k, v]) => (k === "retry-after" && /[a-z]{3}, /i.test(v)) || k.startsWith("anthropic-ratelimit"));
}

test("conformance/classification.json: the daemon classifies each row's evidence, sent by this client, as the row says", async () => {
  const rows = (JSON.parse(readFileSync(join(conformanceDir(), "classification.json"), "utf8")) as { rows: ClassificationRow[] }).rows;
  const c = client("classify");
  let n = 0;
  for (const [i, r] of rows.entries()) {
    if (clockBound(r) || (r.bare_rate_limit_wait_ms ?? 60000) !== 60000 || r.count_unrecognised) continue; // the daemon's own clock and default policy decide these
    const p = await c.allow(`${prefix}:row${i}`);
    const got = await c.record(p, r.evidence, { deadlineMs: r.deadline_ms ?? 0 });
    assert.deepEqual({ outcome: got.classifiedAs, why: got.why }, { outcome: r.want.outcome, why: r.want.why }, r.name);
    n++;
  }
  assert.ok(n >= 60, `only ${n} rows`);
});

/** recording is a fetch that keeps each Record request and breakerd's answer to it, as sent and received. */
function recording(): { fetch: typeof fetch; records: { req: Record<string, unknown>; res: Record<string, unknown> }[] } {
  const records: { req: Record<string, unknown>; res: Record<string, unknown> }[] = [];
  const f: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    if (String(input).endsWith("/Record")) {
      records.push({ req: JSON.parse(String(init?.body)) as Record<string, unknown>, res: (await res.clone().json()) as Record<string, unknown> });
    }
    return res;
  };
  return { fetch: f, records };
}

test("a tool's own bug is not an outage: a plain Error is an unrecognised error, never counted by default", async () => {
  const breaker = `${prefix}:own-bug`;
  const sent = recording();
  for (const w of ["bug-w1", "bug-w2", "bug-w1", "bug-w2"]) {
    const c = client(w, [a.url], { fetch: sent.fetch });
    await assert.rejects(c.guard(breaker, () => Promise.reject(new Error("HTTP 400"))), /HTTP 400/);
  }
  assert.equal(sent.records.length, 4);
  for (const { req, res } of sent.records) {
    assert.deepEqual(req["evidence"], { error_kind: "ERROR_KIND_OTHER" });
    assert.equal(res["classified_as"], "OUTCOME_UNRECOGNISED");
    assert.equal(res["counted"] ?? false, false);
  }
  assert.equal((await client("bug-w3").allow(breaker)).allowed, true, "four failures from two workers past threshold 2, and the tool stays");
});

test("HttpError keeps the status: a real 503 thrown through throwForStatus reaches breakerd as http_status 503", async (t) => {
  const vendor = await serve((_req, res) => {
    res.writeHead(503, { "content-type": "application/json", "retry-after": "3", "x-request-id": "r1" });
    res.end('{"error":{"code":"overloaded"}}');
  });
  t.after(() => vendor.close());
  const breaker = `${prefix}:http-error`;
  const sent = recording();
  const c = client("he-w1", [a.url], { fetch: sent.fetch });
  const err = await c.guard(breaker, async () => throwForStatus(await within("the vendor's /refund", fetch(`${vendor.url}/refund`)))).catch((e: unknown) => e);
  assert.ok(err instanceof HttpError && err.status === 503, String(err));
  assert.equal(vendor.hits.get("/refund"), 1);
  const { date, ...ev } = sent.records[0]?.req["evidence"] as Evidence;
  assert.match(date ?? "", /GMT$/, "the vendor's Date goes with its Retry-After");
  assert.deepEqual(ev, { http_status: 503, headers: { "retry-after": "3" }, body_error_code: "overloaded", no_deadline: true });
  assert.equal(sent.records[0]?.res["classified_as"], "OUTCOME_SERVER_ERROR");
  assert.equal(sent.records[0]?.res["counted"], true);
});

test("exclude: an error the caller excludes is recorded as a never-counted outcome, and re-thrown", async () => {
  const breaker = `${prefix}:excluded`;
  const sent = recording();
  class ValidationError extends Error {}
  for (const w of ["ex-w1", "ex-w2", "ex-w1", "ex-w2"]) {
    const c = client(w, [a.url], { fetch: sent.fetch, exclude: (e: unknown) => e instanceof ValidationError });
    await assert.rejects(c.guard(breaker, () => Promise.reject(new ValidationError("charge id is malformed"))), ValidationError);
  }
  // A call's own exclude, asked before the client's.
  const plain = client("ex-w3", [a.url], { fetch: sent.fetch });
  await assert.rejects(plain.guard(breaker, () => Promise.reject(new HttpError(503)), { exclude: (e) => e instanceof HttpError }), HttpError);
  assert.equal(sent.records.length, 5);
  for (const { req, res } of sent.records) {
    assert.equal(req["outcome"], EXCLUDED_OUTCOME);
    assert.equal(req["evidence"], undefined, "no evidence beside the outcome");
    assert.equal(res["counted"] ?? false, false);
  }
  assert.equal((await client("ex-w4").allow(breaker)).allowed, true);
});
