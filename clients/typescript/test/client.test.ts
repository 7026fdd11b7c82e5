// The client against servers of the test's own: failover, bad input as
// typed errors (never the fallback), the fallback while nothing answers,
// guard's evidence and re-throw. The same behaviour against real daemons
// is test/daemon.test.ts.

import assert from "node:assert/strict";
import { test } from "node:test";

import { APIError, AuthError, CircuitOpenError, Client, ConfigError, ProtocolError, UnreachableError, fallbackDenial, renderToolResult, type ClientOptions } from "../src/index.js";
import { FALLBACK_DENIALS } from "../src/templates.js";
import { Transport, parseURLs } from "../src/transport.js";
import { Clock, DEAD_URL, json, serve } from "./helpers.js";

const allowed = { decision: "DECISION_ALLOWED", ticket: { generation: "3" }, state: { breaker: "b", state: "STATE_CLOSED" } };

test("bad options are ConfigErrors naming the option", () => {
  const cases: [unknown, RegExp][] = [
    [{ urls: "not a url", workerId: "w" }, /^urls: "not a url" is not a URL/],
    [{ urls: ["http://ok:1", "ftp://x"], workerId: "w" }, /^urls\[1\]: "ftp:\/\/x" is not an http or https URL/],
    [{ urls: [], workerId: "w" }, /^urls: at least one/],
    [{ urls: "http://u:p@h:1", workerId: "w" }, /^urls: .* carries credentials/],
    [{ urls: "http://h:1", workerId: "" }, /^workerId: is required/],
    [{ urls: "http://h:1", workerId: "w\n" }, /^workerId: must be 1 to 128 characters/],
  ];
  for (const [o, want] of cases) {
    assert.throws(() => new Client(o as never), (e: unknown) => e instanceof ConfigError && want.test(e.message), String(want));
  }
});

test("every option is checked when the Client is made: a ConfigError that starts with its name", () => {
  const base = { urls: "http://127.0.0.1:2", workerId: "w" };
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [{ allowBudgetMs: "fast" }, "allowBudgetMs", /must be a number of ms above 0 .*, got "fast"$/],
    [{ allowBudgetMs: -1 }, "allowBudgetMs", /, got -1$/],
    [{ rpcTimeoutMs: NaN }, "rpcTimeoutMs", /, got NaN$/],
    [{ firstContactBudgetMs: Infinity }, "firstContactBudgetMs", /at most 2147483647, got Infinity$/],
    [{ watchHeartbeatMs: 0 }, "watchHeartbeatMs", /above 0/],
    [{ savingsIntervalMs: 1e12 }, "savingsIntervalMs", /at most 2147483647 \(0 or less: never\), got 1000000000000$/],
    [{ fallback: "open" }, "fallback", /must be "local" or "closed", got "open"$/],
    [{ fast: "yes" }, "fast", /must be true or false, got "yes"$/],
    [{ onError: "log" }, "onError", /must be a function, got string$/],
    [{ exclude: true }, "exclude", /must be a function, got boolean$/],
    [{ fetch: "x" }, "fetch", /must be a function/],
    [{ clock: 1 }, "clock", /must be a function/],
    [{ token: 42 }, "token", /must be a string, got number$/],
    [{ watch: "web_search" }, "watch", /must be true, false or a list of breaker names, got "web_search"$/],
    [{ watch: ["ok", 3] }, "watch[1]", /must be a string, got number$/],
    [{ watch: ["a\tb"] }, "watch[0]", /must be printable/],
    [{ urls: 42 }, "urls", /must be a URL or a list of URLs, got number$/],
    [{ urls: ["http://h:1", null] }, "urls[1]", /must be a URL string, got null$/],
    [{ workerId: 42 }, "workerId", /must be a string, got number$/],
    [{ workerId: undefined }, "workerId", /is required$/],
    [{ urll: "http://h:1" }, "urll", /is not an option of Client \(urls, token, workerId,/],
    [{ worker_id: "w" }, "worker_id", /is not an option/],
  ];
  for (const [extra, field, want] of cases) {
    assert.throws(
      () => new Client({ ...base, ...extra } as never),
      (e: unknown) => e instanceof ConfigError && e.field === field && e.message.startsWith(`${field}: `) && want.test(e.message),
      `${JSON.stringify(extra)}: want ${field}: ${String(want)}`,
    );
  }
  assert.throws(() => new Client(null as never), (e: unknown) => e instanceof ConfigError && /^options: want \{ urls, workerId \}, got null$/.test(e.message));
});

test("every option the client documents is taken, and one left undefined takes its default", async () => {
  const every: Required<ClientOptions> = {
    urls: ["http://127.0.0.1:2"], token: "", workerId: "w", allowBudgetMs: 1, firstContactBudgetMs: 1, rpcTimeoutMs: 2147483647, fallback: "closed",
    watch: ["a", "b"], savingsIntervalMs: -1, fast: false, fetch: globalThis.fetch, clock: Date.now, watchHeartbeatMs: 15_000, onError: () => undefined, exclude: () => false,
  };
  await new Client(every).close();
  await new Client({ ...every, savingsIntervalMs: 0, watch: false, fallback: "local" }).close();
  const undef = Object.fromEntries(Object.keys(every).map((k) => [k, undefined]));
  await new Client({ ...undef, urls: "http://127.0.0.1:2", workerId: "w" } as ClientOptions).close();
});

test("a breaker, tool or workerId that is not a string says its type, not that it is required", async () => {
  const c = new Client({ urls: DEAD_URL, workerId: "w", onError: () => undefined });
  const named = (field: string, want: RegExp) => (e: unknown) => e instanceof APIError && e.code === "invalid_argument" && e.violations[0]?.field === field && want.test(e.message);
  await assert.rejects(c.allow(42 as never), named("breaker", /breaker: must be a string, got number$/));
  await assert.rejects(c.allow({} as never), named("breaker", /breaker: must be a string, got object$/));
  await assert.rejects(c.allow(undefined as never), named("breaker", /breaker: is required$/));
  await assert.rejects(c.allow("b", { tool: 7 as never }), named("tool", /tool: must be a string, got number$/));
  await assert.rejects(c.states([null as never]), named("breakers[0]", /must be a string, got null$/));
  assert.throws(() => new Client({ urls: DEAD_URL, workerId: 42 as never }), (e: unknown) => e instanceof ConfigError && e.message === "workerId: must be a string, got number");
});

test("record: undefined or null evidence is a success; a permit that is not one is refused, naming permit", async (t) => {
  const records: Record<string, unknown>[] = [];
  const srv = await serve((req, res, body) => {
    if (req.url?.endsWith("/Record")) {
      records.push(JSON.parse(body) as Record<string, unknown>);
      return json(res, 200, { counted: false, classified_as: "OUTCOME_SUCCESS", why: "a success" });
    }
    json(res, 200, allowed);
  });
  t.after(() => srv.close());
  const c = new Client({ urls: srv.url, workerId: "w1", allowBudgetMs: 5000, savingsIntervalMs: 0 });
  t.after(() => c.close());
  const p = await c.allow("b");
  for (const ev of [undefined, null]) assert.equal((await c.record(p, ev)).classifiedAs, "OUTCOME_SUCCESS", String(ev));
  assert.equal((await c.record(p)).classifiedAs, "OUTCOME_SUCCESS", "no evidence");
  assert.deepEqual(records.map((r) => r["evidence"]), [{}, {}, {}], "sent as empty evidence");
  const refused = (field: string, want: RegExp) => (e: unknown) => e instanceof APIError && e.violations[0]?.field === field && want.test(e.message);
  await assert.rejects(c.record(null as never, {}), refused("permit", /permit: must be the Permit allow returned, got null$/));
  await assert.rejects(c.record({} as never, {}), refused("permit", /permit: must be the Permit allow returned/));
  await assert.rejects(c.record(p, "failed" as never), refused("evidence", /must be an object \(CallEvidence\), got string$/));
  await assert.rejects(c.record(p, new Error("boom") as never), refused("evidence", /evidenceOfError/));
  assert.equal(records.length, 3, "a refused record reached the daemon");
  // The fallback's permit takes empty evidence too (the local breaker).
  const down = new Client({ urls: DEAD_URL, workerId: "w", onError: () => undefined, savingsIntervalMs: 0 });
  t.after(() => down.close());
  const local = await down.allow("b");
  for (const ev of [undefined, null]) assert.equal((await down.record(local, ev)).degraded, true);
});

test("record's and guard's options are checked before any round trip, naming the option and showing the value", async (t) => {
  const srv = await serve((req, res) => json(res, 200, req.url?.endsWith("/Record") ? { counted: false, classified_as: "OUTCOME_SUCCESS" } : allowed));
  t.after(() => srv.close());
  const c = new Client({ urls: srv.url, workerId: "w1", allowBudgetMs: 5000, savingsIntervalMs: 0 });
  t.after(() => c.close());
  const p = await c.allow("b");
  const refused = (field: string, want: RegExp) => (e: unknown) => e instanceof APIError && e.code === "invalid_argument" && e.violations[0]?.field === field && want.test(e.message);
  await assert.rejects(c.record(p, {}, { latencyMs: "x" as never }), refused("latencyMs", /latencyMs: must be a finite number of ms, got "x"$/));
  await assert.rejects(c.record(p, {}, { deadlineMs: NaN }), refused("deadlineMs", /got NaN$/));
  await assert.rejects(c.record(p, {}, { outcome: 3 as never }), refused("outcome", /must be a string, got number$/));
  await assert.rejects(c.record(p, {}, { signal: "x" as never }), refused("signal", /must be an AbortSignal, got string$/));
  assert.equal(srv.hits.get("/breakerd.v1.BreakerService/Record") ?? 0, 0, "a refused Record reached the daemon");
  let ran = false;
  const fn = () => ((ran = true), "ok");
  await assert.rejects(c.guard("ok", fn, { deadlineMs: "soon" as never }), refused("deadlineMs", /deadlineMs: must be a finite number of ms, got "soon"$/));
  await assert.rejects(c.guard("ok", fn, { exclude: "validation" as never }), refused("exclude", /must be a function, got string$/));
  await assert.rejects(c.runWith(p, fn, { deadlineMs: "soon" as never }), refused("deadlineMs", /got "soon"$/));
  assert.equal(ran, false, "fn ran under a refused option");
  assert.equal(srv.hits.get("/breakerd.v1.BreakerService/Allow"), 1, "guard asked breakerd under a refused option");
  assert.equal(await c.guard("ok", fn, { deadlineMs: 1000 }), "ok");
});

test("a refused breaker name is an APIError naming the field, never a fallback, even with no daemon", async () => {
  const c = new Client({ urls: DEAD_URL, workerId: "w" });
  for (const [name, field] of [["", "breaker"], ["x".repeat(257), "breaker"], ["a\tb", "breaker"], [" b", "breaker"]] as const) {
    await assert.rejects(c.allow(name), (e: unknown) => e instanceof APIError && e.code === "invalid_argument" && e.violations[0]?.field === field, JSON.stringify(name));
  }
  for (const tool of ["bad tool", "x".repeat(129), "a/b"]) {
    await assert.rejects(c.allow("payments", { tool }), (e: unknown) => e instanceof APIError && e.code === "invalid_argument" && e.violations[0]?.field === "tool", tool);
  }
});

test("a workerId the daemon would refuse is refused at construction, naming workerId", () => {
  for (const workerId of ["has space", "x".repeat(129), "wörker", "a\nb", "w;1"]) {
    assert.throws(() => new Client({ urls: "http://127.0.0.1:2", workerId, watch: false }), (e: unknown) => e instanceof ConfigError && e.field === "workerId" && /security\.md#worker-ids/.test(e.message), JSON.stringify(workerId));
  }
  for (const workerId of ["w", "x".repeat(128), "web-3.example-4121", "ci@pool/7", "a+b=c:d_e"]) {
    void new Client({ urls: "http://127.0.0.1:2", workerId, watch: false }).close();
  }
});

test("check() names the cause, sets it, and says within only for a timeout", async (t) => {
  const refused = new Client({ urls: DEAD_URL, workerId: "w", watch: false, onError: () => undefined });
  await assert.rejects(refused.check(), (e: unknown) => e instanceof UnreachableError && /ECONNREFUSED/.test(e.message) && !/within/.test(e.message) && e.cause !== undefined, "a refusal");
  await refused.close();
  const silent = await serve(() => undefined); // never answers
  t.after(() => silent.close());
  const slow = new Client({ urls: silent.url, workerId: "w", watch: false, rpcTimeoutMs: 300, onError: () => undefined });
  await assert.rejects(slow.check(), (e: unknown) => e instanceof UnreachableError && /within 300 ms/.test(e.message) && e.cause !== undefined, "a timeout");
  await slow.close();
});

test("401, 403, HTML and garbage are typed errors, never the fallback", async (t) => {
  const srv = await serve((req, res) => {
    const p = req.url ?? "";
    if (p.startsWith("/unauth/")) return json(res, 401, { code: "unauthenticated", message: "missing bearer token" });
    if (p.startsWith("/forbidden/")) return json(res, 403, { code: "permission_denied", message: "token lacks role worker" });
    if (p.startsWith("/html/")) {
      res.writeHead(200, { "content-type": "text/html" });
      return res.end("<html><body>Welcome to nginx!</body></html>");
    }
    if (p.startsWith("/html500/")) {
      res.writeHead(500, { "content-type": "text/html" });
      return res.end("<html>Internal Server Error</html>");
    }
    if (p.startsWith("/garbage/")) {
      res.writeHead(200, { "content-type": "application/json" });
      return res.end("{not json");
    }
    if (p.startsWith("/relabeled/")) {
      res.writeHead(400, { "content-type": "application/grpc+proto" });
      return res.end(JSON.stringify({ code: "invalid_argument", message: "worker_id: unknown field", field_violations: [{ field: "worker_id", description: "unknown field" }] }));
    }
    if (p.startsWith("/refused/")) {
      return json(res, 400, { code: "invalid_argument", message: "breaker: is 300 bytes; at most 256", field_violations: [{ field: "breaker", description: "is 300 bytes; at most 256" }] });
    }
    json(res, 200, allowed);
  });
  t.after(() => srv.close());
  const ask = (prefix: string) => new Client({ urls: `${srv.url}/${prefix}/`, workerId: "w" }).allow("b");
  await assert.rejects(ask("unauth"), (e: unknown) => e instanceof AuthError && e.status === 401 && /missing bearer token/.test(e.message));
  await assert.rejects(ask("forbidden"), (e: unknown) => e instanceof AuthError && e.status === 403 && e.code === "permission_denied");
  await assert.rejects(ask("html"), (e: unknown) => e instanceof ProtocolError && /text\/html/.test(e.message) && /nginx/.test(e.message));
  await assert.rejects(ask("html500"), (e: unknown) => e instanceof ProtocolError && e.status === 500);
  await assert.rejects(ask("garbage"), (e: unknown) => e instanceof ProtocolError && /not JSON/.test(e.message));
  await assert.rejects(ask("refused"), (e: unknown) => e instanceof APIError && e.violations[0]?.field === "breaker");
  await assert.rejects(ask("relabeled"), (e: unknown) => e instanceof APIError && e.violations[0]?.field === "worker_id", "breakerd's JSON error under another content type");
});

test("several URLs: a dead daemon is skipped within the budget, and the one that answered is asked first", async (t) => {
  const srv = await serve((_req, res) => json(res, 200, allowed));
  t.after(() => srv.close());
  const down = await serve((_req, res) => json(res, 503, { code: "unavailable", message: "redis unreachable" }));
  t.after(() => down.close());
  const c = new Client({ urls: [DEAD_URL, down.url, srv.url], workerId: "w", allowBudgetMs: 5000 });
  const p = await c.allow("b");
  assert.equal(p.allowed, true);
  assert.equal(p.degraded, false);
  assert.deepEqual(p.ticket, { generation: "3" });
  await c.allow("b");
  assert.equal(srv.hits.get("/breakerd.v1.BreakerService/Allow"), 2);
  assert.equal(down.hits.get("/breakerd.v1.BreakerService/Allow"), 1, "the daemon that answered is asked first");
});

test("a daemon passed over leaves the whole budget to a late one that answers, and gets no request", async (t) => {
  let late = false;
  const hung = await serve(() => undefined); // reads the request, never answers
  t.after(() => hung.close());
  const slow = await serve((_req, res) => {
    if (late) setTimeout(() => json(res, 200, allowed), 2500); // past half the next call's 4 s budget
    else json(res, 200, allowed);
  });
  t.after(() => slow.close());
  // The back-off clock stands still: no background probe reaches the stalled daemon.
  const tr = new Transport({ urls: parseURLs([hung.url, slow.url]), fetch: globalThis.fetch, clock: () => 0 });
  const path = "/breakerd.v1.BreakerService/Allow";
  const first = await tr.call<{ decision: string }>("Allow", { breaker: "b" }, { budgetMs: 2000 });
  assert.equal(first.decision, "DECISION_ALLOWED", "the stalled daemon took its half, then was struck");
  assert.equal(hung.hits.get(path), 1);
  late = true;
  const next = await tr.call<{ decision: string }>("Allow", { breaker: "b" }, { budgetMs: 4000 });
  assert.equal(next.decision, "DECISION_ALLOWED");
  assert.equal(hung.hits.get(path), 1, "the call went on to the stalled daemon");
});

test("no daemon: the local fallback answers, degraded, and opens after the threshold with the fallback's tool_result", async () => {
  const clock = new Clock();
  const c = new Client({ urls: DEAD_URL, workerId: "w", clock: clock.now });
  const boom = () => Promise.reject(Object.assign(new TypeError("fetch failed"), { cause: { code: "ECONNREFUSED" } }));
  for (let i = 0; i < 5; i++) {
    await assert.rejects(c.guard("vendor", boom, { tool: "lookup" }), TypeError);
  }
  const p = await c.allow("vendor", { tool: "lookup" });
  assert.equal(p.allowed, false);
  assert.equal(p.degraded, true);
  assert.equal(p.decision, "DECISION_DENIED_OPEN");
  assert.equal(p.retryAfterMs, 30_000);
  const err = await c.guard("vendor", () => assert.fail("the call went out"), { tool: "lookup" }).catch((e: unknown) => e);
  assert.ok(err instanceof CircuitOpenError);
  // The fallback's own denial: conformance/fallback_denials.json's words, degraded, back when its cooldown ends.
  assert.equal(err.toolResult, renderToolResult({ tool: "lookup", denial: fallbackDenial("open", 30_000, clock.ms), alternatives: [], degraded: true }, clock.ms));
  assert.deepEqual(err.denial, { decision: "DECISION_DENIED_OPEN", ...FALLBACK_DENIALS.open, scope: "breaker", forced: false, untilMs: clock.ms + 30_000, mayReturnAtMs: clock.ms + 30_000 });
  assert.ok(!err.toolResult.includes("vendor"), "no breaker name in the model's words");
  clock.advance(30_000);
  const probe = await c.allow("vendor");
  assert.equal(probe.decision, "DECISION_PROBE");
  const waiting = await c.allow("vendor", { tool: "lookup" });
  assert.equal(waiting.decision, "DECISION_DENIED_PROBE_IN_FLIGHT");
  assert.equal(waiting.denial?.status, FALLBACK_DENIALS.probe_in_flight.status);
  assert.equal(waiting.denial?.mayReturnAtMs, 0, "a probe's time is no wait");
  await c.record(probe, {});
  assert.equal((await c.allow("vendor")).decision, "DECISION_ALLOWED");
});

test("get and getPolicy have no fallback: UnreachableError", async () => {
  const c = new Client({ urls: [DEAD_URL, DEAD_URL], workerId: "w" });
  await assert.rejects(c.get("b"), (e: unknown) => e instanceof UnreachableError && e.causes.length === 2);
  await assert.rejects(c.getPolicy("b"), UnreachableError);
});

test("guard returns a Response as it is and records its status; an aborted signal is a cancel", async (t) => {
  const records: unknown[] = [];
  const srv = await serve((req, res, body) => {
    if (req.url?.endsWith("/Record")) {
      records.push(JSON.parse(body));
      return json(res, 200, { counted: true, classified_as: "OUTCOME_SERVER_ERROR", why: "HTTP 503: a server error" });
    }
    json(res, 200, allowed);
  });
  t.after(() => srv.close());
  const c = new Client({ urls: srv.url, workerId: "w1", allowBudgetMs: 5000 });
  const res = await c.guard("b", async () => new Response("down", { status: 503, headers: { "retry-after": "5" } }), { tool: "t", deadlineMs: 1000 });
  assert.equal(res.status, 503);
  assert.equal(await res.text(), "down", "the body is the caller's");
  const ctl = new AbortController();
  await assert.rejects(
    c.guard("b", () => {
      ctl.abort();
      throw new Error("the tool noticed the abort");
    }, { signal: ctl.signal }),
    /noticed the abort/,
  );
  assert.equal(records.length, 2);
  const [r1, r2] = records as Record<string, unknown>[];
  assert.deepEqual(r1!["evidence"], { http_status: 503, headers: { "retry-after": "5" } });
  assert.equal(r1!["deadline_ms"], "1000");
  assert.deepEqual(r1!["ticket"], { generation: "3" });
  assert.equal(r1!["worker_id"], "w1");
  assert.deepEqual(r2!["evidence"], { error_kind: "ERROR_KIND_CANCELLED" });
});

test("fallback closed: no daemon answers and every call is denied, in the fallback's words, with no return time", async () => {
  const clock = new Clock();
  const c = new Client({ urls: DEAD_URL, workerId: "w", clock: clock.now, fallback: "closed", onError: () => undefined });
  const p = await c.allow("vendor", { tool: "lookup" });
  assert.equal(p.allowed, false);
  assert.equal(p.degraded, true);
  assert.equal(p.retryAfterMs, 0);
  assert.deepEqual(p.denial, { decision: "DECISION_DENIED_OPEN", ...FALLBACK_DENIALS.open, scope: "breaker", forced: false, untilMs: clock.ms, mayReturnAtMs: 0 });
  assert.equal(p.toolResult, renderToolResult({ tool: "lookup", denial: p.denial!, alternatives: [], degraded: true }, clock.ms));
});
