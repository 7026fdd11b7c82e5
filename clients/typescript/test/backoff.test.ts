// A hung daemon (accepts, never answers) is asked again on the Go
// client's schedule (1 s, doubling to 30 s), on the client's clock, which
// the tests move; a late one is slow, not gone; a daemon back from a loss
// gets no caller's call until a probe finds it in time. The fake daemons'
// request counts are the witnesses.

import assert from "node:assert/strict";
import type { ServerResponse } from "node:http";
import { after, test } from "node:test";

import { Client, ReachableAgain, UnreachableError } from "../src/index.js";
import { Clock, json, serve, waitFor, type Served } from "./helpers.js";

const ALLOWED = { decision: "DECISION_ALLOWED", ticket: { generation: "4" }, state: { breaker: "b", state: "STATE_CLOSED" } };

/** Fake is a daemon whose mode the test sets: hung (holds every request), answering (after delayMs), or unavailable. */
class Fake {
  mode: "hung" | "answer" | "unavailable" = "answer";
  delayMs = 0;
  held: ServerResponse[] = [];
  allows: string[] = []; // the breaker of each Allow
  served!: Served;

  static async start(): Promise<Fake> {
    const f = new Fake();
    f.served = await serve((req, res, body) => {
      const method = (req.url ?? "").split("/").pop() ?? "";
      const breaker = method === "Allow" ? String((JSON.parse(body) as { breaker?: string }).breaker) : "";
      if (method === "Allow") f.allows.push(breaker);
      if (f.mode === "hung" || breaker === "held") return void f.held.push(res);
      if (f.mode === "unavailable") return json(res, 503, { code: "unavailable", message: "redis unreachable" });
      setTimeout(() => json(res, 200, method === "Allow" ? ALLOWED : {}), f.delayMs);
    });
    fakes.push(f);
    return f;
  }

  /** requests is how many requests reached it. */
  get requests(): number {
    return [...this.served.hits.values()].reduce((a, b) => a + b, 0);
  }
}

const fakes: Fake[] = [];
after(async () => {
  for (const f of fakes) for (const r of f.held) r.destroy();
  await Promise.all(fakes.map((f) => f.served.close()));
});

const SCHEDULE = [1000, 2000, 4000, 8000, 16_000, 30_000, 30_000];

test("the first-contact budget is spent once per client: the next calls to a silent daemon wait the Allow budget", async () => {
  const d = await Fake.start();
  d.mode = "hung";
  const c = new Client({ urls: d.served.url, workerId: "w1", allowBudgetMs: 50, firstContactBudgetMs: 300, rpcTimeoutMs: 60_000, savingsIntervalMs: 0, onError: () => undefined });
  // The budgets the client waited are the witnesses.
  const waited: number[] = [];
  const spied = c as unknown as { budget(breaker?: string): number };
  const budget = spied.budget.bind(c);
  spied.budget = (breaker?: string) => {
    const ms = budget(breaker);
    waited.push(ms);
    return ms;
  };
  try {
    for (let i = 0; i < 3; i++) assert.ok((await c.allow("b")).degraded);
    assert.equal(c.down, false, "the daemon taken as gone before the first call's RPC timeout");
    assert.deepEqual(waited, [300, 50, 50], "the first-contact budget once, then the Allow budget");
  } finally {
    await c.close();
  }
});

test("a hung daemon is asked again on the Go client's schedule; the loss and the return are each told once", async () => {
  const d = await Fake.start();
  d.mode = "hung";
  const clock = new Clock();
  const told: unknown[] = [];
  const c = new Client({ urls: d.served.url, workerId: "w1", clock: clock.now, allowBudgetMs: 50, firstContactBudgetMs: 100, rpcTimeoutMs: 200, savingsIntervalMs: 0, onError: (e) => told.push(e) });
  try {
    assert.ok((await c.allow("b")).degraded);
    await waitFor(() => c.down, "the hung daemon taken as gone after the RPC timeout");
    // The fake counts a request when its handler runs, which on a busy
    // host can be after the client gave up on it.
    await waitFor(() => d.requests === 1, "the first call at the hung daemon");
    for (let i = 0; i < 20; i++) assert.ok((await c.allow("b")).degraded);
    assert.equal(d.requests, 1, "no call waits for a hung daemon");
    const reach = (c as unknown as { reach: { probes: number; probing: boolean } }).reach;
    for (const [i, wait] of SCHEDULE.entries()) {
      clock.advance(wait - 100);
      await c.allow("b");
      assert.equal(reach.probes, i, `re-probe ${i + 1} sent before its back-off of ${wait} ms`);
      clock.advance(100);
      await c.allow("b");
      assert.equal(reach.probes, i + 1, `re-probe ${i + 1} not sent after its back-off of ${wait} ms`);
      await waitFor(() => !reach.probing, `re-probe ${i + 1} to time out`);
      await waitFor(() => d.requests === i + 2, `re-probe ${i + 1} as one request at the daemon`);
    }
    d.mode = "answer";
    // A re-probe that misses its RPC timeout on a busy host is followed by
    // the next on the schedule: the clock is moved past each.
    await waitFor(async () => {
      clock.advance(30_000);
      await c.allow("b");
      return !c.down;
    }, "a re-probe finding the daemon");
    // On a busy host an Allow's RPC may miss the 200 ms RPC timeout after
    // that: a loss of its own, said in its turn, which the next re-probe
    // on the schedule ends (the clock is moved past it).
    await waitFor(async () => {
      clock.advance(30_000);
      return !(await c.allow("b")).degraded;
    }, "the daemon's own answer");
    const said = told.flatMap((e) => (e instanceof UnreachableError ? ["lost"] : e instanceof ReachableAgain ? ["back"] : []));
    assert.deepEqual(said.slice(0, 2), ["lost", "back"], told.map(String).join("\n"));
    assert.ok(
      said.every((k, i) => k === (i % 2 === 0 ? "lost" : "back")),
      `each loss and each return told once, in turn: ${told.map(String).join("\n")}`,
    );
  } finally {
    await c.close();
  }
});

test("the default onError warns once of the loss and once of the return", async (t) => {
  const warnings: string[] = [];
  t.mock.method(console, "warn", (m: string) => warnings.push(m));
  const d = await Fake.start();
  d.mode = "unavailable";
  const clock = new Clock();
  const c = new Client({ urls: d.served.url, workerId: "w1", clock: clock.now, savingsIntervalMs: 0 });
  try {
    await c.allow("b");
    await waitFor(() => c.down, "the loss");
    d.mode = "answer";
    clock.advance(1000);
    await c.allow("b");
    await waitFor(() => !c.down, "the return");
    for (let i = 0; i < 5; i++) await c.allow("b");
    assert.equal(warnings.filter((w) => w.includes("answers (")).length, 1, warnings.join("\n"));
    assert.equal(warnings.filter((w) => w.includes("answers again")).length, 1, warnings.join("\n"));
  } finally {
    await c.close();
  }
});

test("a late daemon is slow, not hung: every Allow still reaches it, and the client never takes it as gone", async () => {
  const d = await Fake.start();
  const c = new Client({ urls: d.served.url, workerId: "w1", allowBudgetMs: 50, rpcTimeoutMs: 5000, savingsIntervalMs: 0, onError: () => undefined });
  try {
    await c.check();
    // Far past the Allow budget (a busy host's late timers still see the
    // fallback's answer first), well within the RPC timeout.
    d.delayMs = 1000;
    for (let i = 0; i < 5; i++) assert.ok((await c.allow("b")).degraded, "the fallback answers the late Allow");
    await waitFor(() => d.allows.length === 5, "every Allow at the slow daemon");
    assert.equal(c.down, false);
  } finally {
    await c.close();
  }
});

test("a hung daemon is failed over and probed in the background on the Go client's schedule", async () => {
  const hung = await Fake.start();
  const live = await Fake.start();
  hung.mode = "hung";
  const clock = new Clock();
  // A generous Allow budget: on a busy host the live daemon may answer slower than a tight one,
  // and its calls would read as the fallback's.
  const c = new Client({ urls: [hung.served.url, live.served.url], workerId: "w1", clock: clock.now, allowBudgetMs: 5000, rpcTimeoutMs: 400, savingsIntervalMs: 0, onError: () => undefined });
  const transport = (c as unknown as { transport: { probes: number; probesOut: boolean } }).transport;
  try {
    await c.allow("b"); // the first call finds the hung daemon
    await waitFor(() => live.allows.length === 1, "the failover");
    await waitFor(() => hung.requests === 1, "the first call at the hung daemon");
    for (let i = 0; i < 20; i++) assert.equal((await c.allow("b")).degraded, false);
    assert.equal(hung.requests, 1, "no caller's call tries the hung daemon again");
    for (const [i, wait] of SCHEDULE.slice(0, 3).entries()) {
      clock.advance(wait - 100);
      await c.allow("b");
      assert.equal(transport.probes, i);
      clock.advance(100);
      await c.allow("b");
      assert.equal(transport.probes, i + 1, `probe ${i + 1} not sent after its back-off of ${wait} ms`);
      await waitFor(() => !transport.probesOut, `probe ${i + 1} to time out`);
      await waitFor(() => hung.requests === i + 2, `probe ${i + 1}'s one request at the hung daemon`); // its request may be read after the probe gave up
    }
    assert.equal(hung.allows.length, 1, "only probes reach the hung daemon");
    assert.equal(c.down, false);
  } finally {
    await c.close();
  }
});

test("a rejoin is as quiet as a loss: a daemon back cold gets no caller's Allow", async () => {
  // a: answers Unavailable (lost), then 1 s late (back, cold, as a daemon
  // busy with its start), the probe its back-off is due for too. b
  // answers, with one call held past the Allow budget, so that the calls
  // start elsewhere when they can.
  const a = await Fake.start();
  const b = await Fake.start();
  const clock = new Clock();
  const c = new Client({ urls: [a.served.url, b.served.url], workerId: "w1", clock: clock.now, allowBudgetMs: 500, rpcTimeoutMs: 10_000, savingsIntervalMs: 0, onError: () => undefined });
  const transport = (c as unknown as { transport: { probesOut: boolean } }).transport;
  try {
    await c.check();
    a.mode = "unavailable";
    let lost = 0;
    for (let i = 0; i < 10; i++) if ((await c.allow("b")).degraded) lost++;
    a.mode = "answer";
    a.delayMs = 1000;
    // a's back-off is over: a call, with b free, has a probed in the
    // background, and the cold daemon answers the probe late.
    const probed = a.requests;
    clock.advance(SCHEDULE[0] as number);
    await c.allow("b");
    await waitFor(() => a.requests === probed + 1, "the probe at a");
    await waitFor(() => !transport.probesOut, "a's late answer to the probe");
    void c.allow("held");
    await waitFor(() => b.allows.includes("held"), "the held call at b");
    const heldAt = Date.now();
    await waitFor(() => Date.now() - heldAt > 500, "the held call outstanding past the Allow budget");
    const before = a.allows.filter((x) => x === "b").length;
    let rejoin = 0;
    for (let i = 0; i < 10; i++) if ((await c.allow("b")).degraded) rejoin++;
    assert.deepEqual([lost, rejoin], [0, 0], `${lost} fallbacks at the loss, ${rejoin} at the rejoin`);
    assert.equal(a.allows.filter((x) => x === "b").length, before, "no caller's Allow went to the cold daemon");
  } finally {
    await c.close();
  }
});

test("a call that fails after a daemon answered one begun later leaves the client up; one begun after the answer does not", async () => {
  const d = await Fake.start();
  const told: unknown[] = [];
  const c = new Client({ urls: d.served.url, workerId: "w1", allowBudgetMs: 100, rpcTimeoutMs: 60_000, savingsIntervalMs: 0, onError: (e) => told.push(e) });
  // The RPCs the client makes, to wait for the held one's end.
  const rpcs: Promise<unknown>[] = [];
  const spied = c as unknown as { rpc(...args: unknown[]): Promise<unknown> };
  const rpc = spied.rpc.bind(c);
  spied.rpc = (...args: unknown[]) => {
    const p = rpc(...args);
    rpcs.push(p);
    return p;
  };
  try {
    const held = c.allow("held"); // the first call: a connection of its own, held at the daemon
    await waitFor(() => d.allows.includes("held"), "the held Allow at the daemon");
    assert.equal((await c.allow("b")).degraded, false, "the daemon answers another call meanwhile");
    for (const r of d.held.splice(0)) r.destroy(); // the held call's connection closed unanswered, as a daemon back from a stall may
    assert.ok((await held).degraded);
    await assert.rejects(rpcs[0]!, UnreachableError, "the held Allow's RPC");
    assert.equal(c.down, false, "a call begun before an answer made the client down");
    assert.deepEqual(told.filter((e) => e instanceof UnreachableError).map(String), []);

    await d.served.close(); // now every call is refused: one begun after the last answer
    assert.ok((await c.allow("b")).degraded);
    await waitFor(() => c.down, "the client to take the refusing daemon as gone");
    assert.equal(told.filter((e) => e instanceof UnreachableError).length, 1, told.map(String).join("\n"));
  } finally {
    await c.close();
  }
});
