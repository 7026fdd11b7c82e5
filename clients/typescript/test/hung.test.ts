// A daemon that hangs (accepts, answers nothing) or is slow, seen from the
// client, against real daemons behind a TCP proxy of the test's own: a
// hung daemon is failed over, or, when none answers, no call waits for it
// any more and the loss is told once; a breaker last known open lets at
// most one call out per probe; a slow daemon still gets every Record.
// The fake vendor's call count and the proxy's connections are the witnesses.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Client, UnreachableError, type Permit } from "../src/index.js";
import { startDaemon, uniq, type Daemon } from "./daemon.js";
import { DEAD_URL, waitFor } from "./helpers.js";
import { Proxy } from "./proxy.js";

const prefix = uniq();
const policy = `breakers:
  - match: "${prefix}*"
    threshold: 2
    min_workers: 2
    cooldown_base: 10m
`;
let a: Daemon;
let b: Daemon;
const proxies: Proxy[] = [];

before(async () => {
  [a, b] = await Promise.all([startDaemon({ policy }), startDaemon({ policy })]);
});
after(async () => {
  await Promise.all(proxies.map((p) => p.close()));
  await Promise.all([a?.stop(), b?.stop()]);
});

async function proxy(d: Daemon): Promise<Proxy> {
  const p = await Proxy.start(d.url);
  proxies.push(p);
  return p;
}

const fail = () => Promise.reject(Object.assign(new Error("vendor down"), { status: 503, headers: new Headers() }));

/** trip opens the breaker through the clients (threshold 2 from 2 workers). */
async function trip(breaker: string, ...clients: Client[]): Promise<void> {
  for (const c of clients.slice(0, 2)) await assert.rejects(c.guard(breaker, fail), /vendor down/);
}

test("a hung daemon is failed over, and no later call waits for it", async () => {
  const hung = await proxy(a);
  hung.stall();
  // A generous Allow budget: on a busy host the daemon that answers may take longer than the
  // default 50 ms, and this test means to see its answers.
  const c = new Client({ urls: [hung.url, b.url], workerId: "w1", rpcTimeoutMs: 1000, allowBudgetMs: 5000, onError: () => undefined });
  // The first call finds the hung daemon and goes on to the next within its budget.
  assert.equal((await c.allow(`${prefix}x`)).degraded, false, "the call that found the hung daemon is answered by the next");
  await waitFor(async () => !(await c.allow(`${prefix}x`)).degraded, "an answer from the daemon that answers");
  const tried = hung.connections;
  for (let i = 0; i < 20; i++) {
    const p = await c.allow(`${prefix}x`);
    assert.ok(p.allowed && !p.degraded);
  }
  assert.equal(hung.connections, tried, "no call waits for the hung daemon again");
  assert.equal(c.down, false);
  await c.close();
});

test("when no daemon answers, calls stop waiting, the loss is told once, and the return is found in the background", async () => {
  const px = await proxy(a);
  const errors: unknown[] = [];
  let calls = 0;
  let allows = 0;
  const counting: typeof fetch = (input, init) => {
    calls++;
    if (String(input).endsWith("/Allow")) allows++;
    return fetch(input, init);
  };
  const c = new Client({ urls: px.url, workerId: "w1", rpcTimeoutMs: 500, fetch: counting, onError: (e) => errors.push(e) });
  assert.equal((await c.allow(`${prefix}x`)).degraded, false);
  px.stall();
  await c.allow(`${prefix}x`);
  await waitFor(() => c.down, "the daemon taken as gone after the RPC timeout");
  const sent = calls;
  for (let i = 0; i < 50; i++) {
    const p = await c.allow(`${prefix}x`);
    assert.ok(p.allowed && p.degraded);
  }
  assert.ok(calls - sent <= 2, `${calls - sent} calls while down: allows answer from the fallback with no call (only re-probes)`);
  const losses = () => errors.filter((e) => e instanceof UnreachableError && /no breakerd at .* answers/.test(e.message)).length;
  assert.equal(losses(), 1, errors.map(String).join("\n"));
  px.restore();
  await waitFor(() => !c.down, "the re-probe finding the daemon again");
  // The fallback stands down: the next Allow goes to the daemon (its
  // answer may come after the Allow budget on a busy machine: then the
  // next ones bring it).
  const back = allows;
  await c.allow(`${prefix}x`);
  assert.equal(allows, back + 1, "the Allow after the return is sent to the daemon");
  await waitFor(async () => !(await c.allow(`${prefix}x`)).degraded, "the daemon's own answer");
  assert.equal(losses(), 1);
  await c.close();
});

test("check() rejects loudly where no daemon answers; the default onError warns once", async (t) => {
  const warnings: string[] = [];
  t.mock.method(console, "warn", (m: string) => warnings.push(m));
  const c = new Client({ urls: DEAD_URL, workerId: "w1" });
  assert.equal((await c.allow("payments")).degraded, true); // quietly, as a fallback must
  await waitFor(() => c.down, "the loss");
  for (let i = 0; i < 5; i++) await c.allow("payments");
  assert.equal(warnings.filter((w) => w.includes(`no breakerd at ${DEAD_URL}/ answers`)).length, 1, warnings.join("\n"));
  await assert.rejects(c.check(), (e: unknown) => e instanceof UnreachableError && e.message.includes(`no breakerd answers at ${DEAD_URL}/`));
  await c.close();
  const ok = new Client({ urls: a.url, workerId: "w1" });
  await ok.check();
  await ok.close();
});

test("the half-open herd at a slow daemon: callers that heard the trip send at most one call to the vendor", async () => {
  const breaker = `${prefix}:herd`;
  const px = await proxy(a);
  let skew = 0;
  const clock = () => Date.now() + skew;
  const callers = Array.from({ length: 10 }, (_, i) => new Client({ urls: px.url, workerId: `w${i}`, clock, allowBudgetMs: 5000, onError: () => undefined }));
  await trip(breaker, ...callers);
  for (const c of callers) assert.equal((await c.allow(breaker)).allowed, false, "every caller has heard the trip");
  // Allow budget 50 ms, the daemon 150 ms slower; the callers' clocks pass
  // the deny-until they heard: the probe is due as far as they know.
  const slow = callers.map((c, i) => new Client({ urls: px.url, workerId: `w${i}`, clock, allowBudgetMs: 50, onError: () => undefined }));
  for (let i = 0; i < slow.length; i++) await slow[i]!.allow(breaker); // first contact, the trip heard
  px.delayMs = 200;
  skew = 15 * 60_000;
  let vendor = 0;
  await Promise.all(
    slow.map(async (c) => {
      const p = await c.allow(breaker);
      if (p.allowed) {
        vendor++;
        await c.record(p, { http_status: 503 });
      }
    }),
  );
  assert.ok(vendor <= 1, `${vendor} calls at the vendor for one probe`);
  await Promise.all([...callers, ...slow].map((c) => c.close()));
});

test("no daemon at a due probe: one call per client goes, the rest wait for its outcome", async () => {
  const breaker = `${prefix}:due`;
  const px = await proxy(a);
  let skew = 0;
  const c = new Client({ urls: px.url, workerId: "w1", clock: () => Date.now() + skew, rpcTimeoutMs: 500, allowBudgetMs: 500, onError: () => undefined });
  const other = new Client({ urls: a.url, workerId: "w2", allowBudgetMs: 5000 });
  await trip(breaker, c, other);
  assert.equal((await c.allow(breaker)).allowed, false);
  px.stall();
  skew = 15 * 60_000;
  const got: Permit[] = await Promise.all(Array.from({ length: 10 }, () => c.allow(breaker)));
  assert.equal(got.filter((p) => p.allowed).length, 1, got.map((p) => p.decision).join(","));
  assert.ok(got.every((p) => p.degraded));
  await Promise.all([c.close(), other.close()]);
});

test("a daemon slower than the Allow budget still gets every Record", async () => {
  const breaker = `${prefix}:slow`;
  const px = await proxy(a);
  const c = new Client({ urls: px.url, workerId: "w1", allowBudgetMs: 50, firstContactBudgetMs: 5000, onError: () => undefined });
  const watcher = new Client({ urls: a.url, workerId: "w2", allowBudgetMs: 5000 });
  await c.allow(breaker); // its answer brings the policy: the fallback opens at 2 failures
  px.delayMs = 200;
  for (let i = 1; i <= 2; i++) {
    const p = await c.allow(breaker);
    assert.ok(p.allowed && p.degraded, "the fallback answered the late Allow");
    await c.record(p, { http_status: 503 });
    await waitFor(async () => Number((await watcher.get(breaker)).failures ?? 0) === i, `record ${i} at the daemon`);
  }
  await Promise.all([c.close(), watcher.close()]);
});

test("a Record a slow daemon applied and the next daemon got too counts once", async () => {
  const breaker = `${prefix}:twice`;
  const [slow, next] = [await proxy(a), await proxy(b)];
  const c = new Client({ urls: [slow.url, next.url], workerId: "w1", rpcTimeoutMs: 1000, allowBudgetMs: 5000, onError: () => undefined });
  const watcher = new Client({ urls: b.url, workerId: "w2", allowBudgetMs: 5000 });
  try {
    const p = await c.allow(breaker);
    assert.ok(p.allowed && !p.degraded);
    slow.delayMs = 800; // past the slow daemon's share of the RPC timeout: the Record goes on to the next
    const r = await c.record(p, { http_status: 503 });
    assert.ok(r.counted && !r.degraded, "the next daemon answered the Record");
    assert.equal(slow.methods.get("Record"), 1, "the slow daemon got the Record");
    assert.equal(next.methods.get("Record"), 1, "the next daemon got it too");
    await waitFor(async () => Number((await watcher.get(breaker)).failures ?? 0) >= 1, "the failure at the daemons");
    assert.equal(Number((await watcher.get(breaker)).failures), 1, "one failure, however many daemons got it");
  } finally {
    await Promise.all([c.close(), watcher.close()]);
  }
});

test("a stalled daemon costs at most the Allow that found it", async () => {
  const [hung, next] = [await proxy(a), await proxy(b)];
  // The client's clock stands still: the stalled daemon's back-off never ends, so no background
  // probe adds a connection however long the calls take on a busy host.
  const c = new Client({ urls: [hung.url, next.url], workerId: "w1", allowBudgetMs: 200, clock: () => 1_700_000_000_000, onError: () => undefined });
  try {
    await c.check(); // contact made: each allow waits the Allow budget, not the first-contact one
    hung.stall();
    const before = { hung: hung.connections, next: next.methods.get("Allow") ?? 0 };
    for (let i = 0; i < 20; i++) await c.allow(`${prefix}stalled`);
    // No wait for the failover in between: the first call is still outstanding at the stalled
    // daemon, and every call goes on to the next one. The wire is the witness, not the budget
    // (on a busy host the daemon that answers may answer late, and the fallback answers meanwhile).
    await waitFor(() => (next.methods.get("Allow") ?? 0) - before.next === 20, "every Allow at the daemon that answers");
    assert.ok(hung.connections - before.hung <= 1, `${hung.connections - before.hung} new connections to the stalled daemon, want at most the first call's`);
  } finally {
    await c.close();
  }
});
