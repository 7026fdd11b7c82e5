// Fast mode against real daemons built from this repository: healthy
// calls cost Redis nothing (its own commands counted at a Redis of this
// test's own), a trip made by other workers reaches the view over the
// stream with no Allow sent (counted at a proxy), the fleet still gets
// one probe, a stalled stream sends Allows back to breakerd, and the
// classification rows reach breakerd through fast mode as written.

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { connect, createServer, type AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { Client, FAST_NOT_SENT, HttpError } from "../src/index.js";
import { startDaemon, uniq, type Daemon } from "./daemon.js";
import { conformanceDir, waitFor } from "./helpers.js";
import { Proxy } from "./proxy.js";

const POLICY = `defaults:
  threshold: 3
  min_workers: 2
  cooldown_base: 10m
breakers:
  - match: "*probe"
    threshold: 1
    min_workers: 1
    cooldown_base: 1ms
    cooldown_cap: 1ms
`;
const HEALTHY_CALLS = 1000;

let redis: ChildProcess;
let redisPort = 0;
let d: Daemon;
let d2: Daemon;

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** redisCommand sends one inline command to this test's Redis and returns its reply's text. */
function redisCommand(cmd: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(redisPort, "127.0.0.1");
    let out = "";
    s.on("data", (b) => {
      out += b.toString("latin1");
      const m = /^\$(\d+)\r\n/.exec(out);
      if (out.startsWith("+") || out.startsWith("-") || (m && out.length >= m[0].length + Number(m[1]))) (s.end(), resolve(out));
    });
    s.on("error", reject);
    s.write(cmd + "\r\n");
  });
}

/** scriptCalls is how many scripts and reads Redis has run (INFO commandstats): the cost of Allows and Records. */
async function scriptCalls(): Promise<number> {
  const info = await redisCommand("INFO commandstats");
  let n = 0;
  for (const m of info.matchAll(/^cmdstat_(\w+):calls=(\d+)/gm)) {
    if (/^(eval|fcall|hget|hmget|hgetall|get|mget)/.test(m[1]!)) n += Number(m[2]);
  }
  return n;
}

before(async () => {
  redisPort = await freePort();
  redis = spawn("redis-server", ["--port", String(redisPort), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"], { stdio: "ignore" });
  await waitFor(() => redisCommand("PING").then((r) => r.startsWith("+PONG"), () => false), "this test's Redis");
  // A short heartbeat: a stalled stream is dropped within 3 of them.
  const args = ["--redis-url", `redis://127.0.0.1:${redisPort}/0`, "--http-heartbeat", "200ms"];
  [d, d2] = await Promise.all([startDaemon({ embedded: true, args, policy: POLICY }), startDaemon({ embedded: true, args, policy: POLICY })]);
});
after(async () => {
  await Promise.all([d?.stop(), d2?.stop()]);
  redis?.kill();
});

const fastClient = (url: string, worker: string) =>
  new Client({ urls: url, workerId: worker, fast: true, allowBudgetMs: 5000, savingsIntervalMs: 0, onError: () => undefined });
const strictClient = (url: string, worker: string) =>
  new Client({ urls: url, workerId: worker, allowBudgetMs: 5000, savingsIntervalMs: 0, onError: () => undefined });

/** inProcess says c's view answers an Allow of b itself (breakerd's last word it heard: closed, nothing denied). */
function inProcess(c: Client, b: string): boolean {
  const view = c.fastView as unknown as { entries: Map<string, { healthy: boolean }> };
  return view.entries.get(b)?.healthy === true;
}

async function failOnce(c: Client, b: string): Promise<void> {
  await assert.rejects(c.guard(b, () => Promise.reject(new HttpError(503))));
}

test("1,000 healthy calls in fast mode cost Redis nothing", async () => {
  const c = fastClient(d.url, "fast-1");
  const s = strictClient(d.url, "strict-1");
  try {
    const b = uniq();
    await c.guard(b, () => "ok"); // learns the breaker
    await waitFor(() => c.openCache.status.connected, "the watch stream live");
    const at = await scriptCalls();
    for (let i = 0; i < HEALTHY_CALLS; i++) await c.guard(b, () => "ok");
    const fast = (await scriptCalls()) - at;
    for (let i = 0; i < 20; i++) await s.guard(b, () => "ok");
    const strict = (await scriptCalls()) - at - fast;
    console.log(`Redis scripts and reads: ${fast} for ${HEALTHY_CALLS} fast calls, ${strict} for 20 strict ones`);
    assert.equal(fast, 0);
    assert.ok(strict >= 40, `the count misses strict calls: ${strict}`);
    assert.ok(c.fastView!.stats.allowed >= HEALTHY_CALLS && c.fastView!.stats.skipped >= HEALTHY_CALLS);
  } finally {
    await Promise.all([c.close(), s.close()]);
  }
});

test("a trip made by other workers reaches the fast view with no Allow sent", async () => {
  const px = await Proxy.start(d.url);
  const c = fastClient(px.url, "fast-2");
  const [w1, w2] = [strictClient(d2.url, "w1"), strictClient(d2.url, "w2")];
  try {
    const b = uniq();
    await c.guard(b, () => "ok");
    await waitFor(() => c.openCache.status.connected, "the watch stream live");
    const allows = px.methods.get("Allow") ?? 0;
    for (const w of [w1, w2, w1]) await failOnce(w, b);
    await waitFor(async () => !(await c.allow(b)).allowed, "the trip in the fast view");
    const p = await c.allow(b);
    assert.equal(p.decision, "DECISION_DENIED_OPEN");
    assert.ok(p.toolResult.length > 0 && p.denial !== undefined, "the daemon's Denial, rendered");
    const strict = await w1.allow(b);
    // The same words as breakerd's answer; the wait is counted down on each side's clock.
    const words = (t: string) => ({ ...(JSON.parse(t) as Record<string, unknown>), may_return_in_ms: 0 });
    assert.deepEqual(words(p.toolResult), words(strict.toolResult));
    assert.equal(px.methods.get("Allow") ?? 0, allows, "no Allow of the fast client went to breakerd");
  } finally {
    await Promise.all([c.close(), w1.close(), w2.close()]);
    await px.close();
  }
});

test("a failure goes to breakerd, and the successes after it too", async () => {
  const px = await Proxy.start(d.url);
  const c = fastClient(px.url, "fast-3");
  try {
    const b = uniq();
    await c.guard(b, () => "ok");
    await waitFor(() => c.openCache.status.connected, "the watch stream live");
    const sent = px.requests;
    await failOnce(c, b);
    const r = await c.record(await c.allow(b), {});
    assert.notEqual(r.why, FAST_NOT_SENT, "the success after a failure was not sent");
    assert.ok(px.requests - sent >= 2, `${px.requests - sent} calls for a failure and the success after it`);
  } finally {
    await c.close();
    await px.close();
  }
});

test("two fast clients: the fleet gets one probe", async () => {
  const [a, b] = [fastClient(d.url, "probe-a"), fastClient(d2.url, "probe-b")];
  try {
    const name = `${uniq()}-probe`;
    await a.guard(name, () => "ok");
    await b.guard(name, () => "ok");
    await waitFor(() => a.openCache.status.connected && b.openCache.status.connected, "both streams live");
    await failOnce(a, name); // threshold 1: open, its 1 ms cooldown then due
    // b's view may allow in-process until the trip reaches its stream (the
    // trade fast mode makes); the probe is judged once it has.
    await waitFor(() => !inProcess(b, name), "the trip in b's view");
    let probes = 0;
    let held = 0;
    await waitFor(async () => {
      const got = await Promise.all([a.allow(name), b.allow(name), a.allow(name), b.allow(name)]);
      probes += got.filter((p) => p.decision === "DECISION_PROBE").length;
      held += got.filter((p) => p.decision === "DECISION_DENIED_PROBE_IN_FLIGHT").length;
      return probes > 0;
    }, "a probe");
    for (let i = 0; i < 10; i++) {
      const got = await Promise.all([a.allow(name), b.allow(name)]);
      probes += got.filter((p) => p.decision === "DECISION_PROBE").length;
      assert.ok(got.every((p) => !p.allowed), "a call went out beside the probe");
    }
    assert.equal(probes, 1, "one probe fleet-wide");
  } finally {
    await Promise.all([a.close(), b.close()]);
  }
});

test("a stalled stream sends Allows back to breakerd, so a trip during the stall is not allowed for long", async () => {
  const px = await Proxy.start(d.url);
  const c = new Client({ urls: px.url, workerId: "fast-4", fast: true, allowBudgetMs: 5000, savingsIntervalMs: 0, watchHeartbeatMs: 200, onError: () => undefined });
  const [w1, w2] = [strictClient(d2.url, "w1"), strictClient(d2.url, "w2")];
  try {
    const b = uniq();
    await c.guard(b, () => "ok");
    await waitFor(() => c.openCache.status.connected, "the watch stream live");
    px.stall(); // the stream (and every call through the proxy) hears nothing
    await waitFor(() => !c.openCache.status.connected, "the stream dropped after its missed heartbeats");
    for (const w of [w1, w2, w1]) await failOnce(w, b);
    px.restore();
    const p = await c.allow(b);
    assert.equal(p.decision, "DECISION_DENIED_OPEN", "breakerd was asked, not the stale view");
  } finally {
    await Promise.all([c.close(), w1.close(), w2.close()]);
    await px.close();
  }
});

test("a breaker the watch stream does not follow is never answered from the view", async () => {
  const followed = uniq();
  const c = new Client({ urls: d.url, workerId: "fast-6", fast: true, watch: [followed], allowBudgetMs: 5000, savingsIntervalMs: 0, onError: () => undefined });
  try {
    const other = uniq();
    await c.guard(followed, () => "ok");
    await c.guard(other, () => "ok");
    await waitFor(() => c.openCache.status.connected, "the watch stream live");
    assert.equal((await c.allow(followed)).fast, true);
    assert.equal((await c.allow(other)).fast, undefined, "a breaker no event reaches was answered from the view");
  } finally {
    await c.close();
  }
});

test("a fast client whose daemon exits is told of its stream's failure naming the URL and the cause", async () => {
  const own = await startDaemon();
  const told: unknown[] = [];
  const c = new Client({ urls: own.url, workerId: "fast-7", fast: true, allowBudgetMs: 5000, savingsIntervalMs: 0, onError: (e) => told.push(e) });
  try {
    await c.guard(uniq(), () => "ok");
    await waitFor(() => c.openCache.status.connected, "the watch stream live");
    await own.stop();
    const watch = `watch ${own.url}/v1/watch?run_notices=true: `;
    await waitFor(() => told.some((e) => String(e).includes(watch)), "the stream's failure told");
    const e = told.find((e) => String(e).includes(watch)) as Error;
    assert.match(e.message, /: (fetch failed: connect ECONNREFUSED|ECONNRESET aborted|terminated)/, e.message);
    assert.notEqual(e.cause, undefined, "the cause is kept");
  } finally {
    await c.close();
    await own.stop();
  }
});

interface Row {
  name: string;
  evidence: Record<string, unknown>;
  deadline_ms?: number;
  want: { outcome: string };
}

test("classification.json: every row recorded through fast mode reaches breakerd as written", async () => {
  const list = (JSON.parse(readFileSync(join(conformanceDir(), "classification.json"), "utf8")) as { rows: Row[] }).rows;
  assert.ok(list.length > 0, "no rows read");
  const c = fastClient(d.url, "fast-5");
  try {
    await c.guard(uniq(), () => "ok");
    await waitFor(() => c.openCache.status.connected, "the watch stream live");
    for (const row of list) {
      const b = uniq();
      const p = await c.allow(b);
      const r = await c.record(p, row.evidence, { deadlineMs: row.deadline_ms ?? 0 });
      if (r.why === FAST_NOT_SENT) assert.equal(row.want.outcome, "OUTCOME_SUCCESS", `${row.name}: not sent, yet not a success`);
      else assert.equal(r.classifiedAs, row.want.outcome, row.name);
    }
  } finally {
    await c.close();
  }
});
