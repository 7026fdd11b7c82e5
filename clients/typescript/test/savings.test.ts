// What the client saved, reported to a real daemon built from this
// repository and read back from its Savings (the wire as the witness):
// denials the live open cache answered, tools runs left out (one per run
// and tool), a report kept while it could not go out and sent once it
// could, the periodic report, and no report when nothing was saved. The
// batching bounds are checked on a recorded send.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import {
  APIError,
  CircuitOpenError,
  Client,
  MAX_SAVINGS_BATCH,
  MAX_SAVINGS_COUNT,
  MAX_SAVINGS_HELD,
  Run,
  Savings,
  UnreachableError,
  type ClientOptions,
  type SavingsReport,
  type ToolRef,
} from "../src/index.js";
import { startDaemon, uniq, type Daemon } from "./daemon.js";
import { conformanceDir, waitFor, within } from "./helpers.js";

const prefix = uniq();
let d: Daemon;

before(async () => {
  d = await startDaemon();
});
after(async () => {
  await d?.stop();
});

/** call sends one BreakerService method to the daemon, as an operator would. */
async function call(method: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await within(`the daemon's ${method}`, fetch(`${d.url}/breakerd.v1.BreakerService/${method}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  }));
  const text = await res.text();
  assert.equal(res.status, 200, text);
  return JSON.parse(text) as Record<string, unknown>;
}

const forceOpen = (breaker: string) => call("Force", { breaker, mode: "FORCE_MODE_OPEN", reason: "maintenance window", operator: "ops" });

/** saved is the daemon's Savings row for breaker (zeros when it has none). */
async function saved(breaker: string): Promise<{ daemon_denials: number; client_denials: number; tools_removed: number }> {
  const rows = ((await call("Savings", { breakers: [breaker] }))["breakers"] ?? []) as Record<string, string>[];
  const row = rows.find((r) => r["breaker"] === breaker) ?? {};
  return { daemon_denials: Number(row["daemon_denials"] ?? 0), client_denials: Number(row["client_denials"] ?? 0), tools_removed: Number(row["tools_removed"] ?? 0) };
}

/** Wire counts the requests a client sends, by method, and can cut ReportSavings off as a lost network would. */
class Wire {
  readonly sent = new Map<string, number>();
  reportsDown = false;
  readonly fetch: typeof fetch = (input, init) => {
    const method = String(input).split("/").pop() ?? "";
    this.sent.set(method, (this.sent.get(method) ?? 0) + 1);
    if (method === "ReportSavings" && this.reportsDown) return Promise.reject(new TypeError("fetch failed"));
    return fetch(input, init);
  };
  count(method: string): number {
    return this.sent.get(method) ?? 0;
  }
}

function client(wire: Wire, extra: Partial<ClientOptions> = {}): Client {
  return new Client({ urls: [d.url], workerId: "w1", allowBudgetMs: 5000, savingsIntervalMs: 3_600_000, fetch: wire.fetch, ...extra });
}

/** watching is a client whose live open cache knows breaker denies. */
async function watching(breaker: string, wire: Wire, extra: Partial<ClientOptions> = {}): Promise<Client> {
  const c = client(wire, { watch: true, ...extra });
  await waitFor(() => c.openCache.status.connected && c.openCache.lookup(breaker) !== undefined, "the forced breaker in the live open cache");
  return c;
}

test("denials the live open cache answered are reported, once", async () => {
  const breaker = `${prefix}:cached`;
  await forceOpen(breaker);
  const wire = new Wire();
  const c = await watching(breaker, wire);
  for (let i = 0; i < 3; i++) assert.equal((await c.allow(breaker)).allowed, false);
  assert.equal(wire.count("Allow"), 0, "answered in this process");
  assert.deepEqual([...c.savings.pending()], [[breaker, { localDenials: 3, toolsRemoved: 0 }]]);
  assert.equal(await c.flushSavings(), true);
  assert.equal(wire.count("ReportSavings"), 1);
  assert.deepEqual(await saved(breaker), { daemon_denials: 0, client_denials: 3, tools_removed: 0 });
  assert.equal(c.savings.denialsReported, 3);
  await c.close();
  assert.equal(wire.count("ReportSavings"), 1, "nothing left: close sent nothing more");
});

test("tools a Run left out are reported once per run and tool", async () => {
  const breaker = `${prefix}:payments`;
  await forceOpen(breaker);
  const wire = new Wire();
  const c = client(wire);
  const tools = [{ name: "web_search", breaker: `${prefix}:search` }, { name: "refund_charge", breaker }, { name: "refund_status", breaker }];
  const run = new Run(c);
  assert.deepEqual((await run.available(tools)).map((t) => t.name), ["web_search"]);
  assert.deepEqual((await run.available(tools)).map((t) => t.name), ["web_search"], "the same run: not counted again");
  await assert.rejects(run.guard(tools[1]!, () => "x"), CircuitOpenError);
  assert.deepEqual((await new Run(c).available(tools.slice(0, 2))).map((t) => t.name), ["web_search"], "another run, one of the tools");
  await c.close(); // close sends what is left
  assert.deepEqual(await saved(breaker), { daemon_denials: 0, client_denials: 0, tools_removed: 3 });
  assert.equal((await saved(`${prefix}:search`)).tools_removed, 0);
  assert.equal(c.savings.removedReported, 3);
});

test("a report that could not go out is kept and sent with the next", async () => {
  const breaker = `${prefix}:kept`;
  await forceOpen(breaker);
  const wire = new Wire();
  const c = await watching(breaker, wire);
  try {
    assert.equal((await c.allow(breaker)).allowed, false);
    wire.reportsDown = true;
    assert.equal(await c.flushSavings(), false);
    assert.deepEqual([...c.savings.pending()], [[breaker, { localDenials: 1, toolsRemoved: 0 }]]);
    assert.equal((await saved(breaker)).client_denials, 0);
    wire.reportsDown = false;
    assert.equal((await c.allow(breaker)).allowed, false);
    assert.equal(await c.flushSavings(), true);
    assert.equal(c.savings.pending().size, 0);
    assert.equal((await saved(breaker)).client_denials, 2);
    assert.equal(wire.count("ReportSavings"), 2);
  } finally {
    await c.close();
  }
});

test("reports go out every savingsIntervalMs", async () => {
  const breaker = `${prefix}:periodic`;
  await forceOpen(breaker);
  const c = await watching(breaker, new Wire(), { savingsIntervalMs: 50 });
  try {
    assert.equal((await c.allow(breaker)).allowed, false);
    await waitFor(async () => (await saved(breaker)).client_denials === 1, "the periodic report");
  } finally {
    await c.close();
  }
});

test("nothing saved, nothing sent; a denial breakerd answered is its own to count", async () => {
  const breaker = `${prefix}:daemon`;
  await forceOpen(breaker);
  const wire = new Wire();
  const c = client(wire); // no open cache: breakerd answers every call
  assert.equal((await c.allow(breaker)).allowed, false);
  assert.equal((await new Run(c).available([{ name: "web_search", breaker: `${prefix}:open-search` }])).length, 1);
  assert.equal(await c.flushSavings(), true);
  await c.close();
  assert.equal(wire.count("ReportSavings"), 0);
  await waitFor(async () => (await saved(breaker)).daemon_denials >= 1, "the daemon's own denial");
  assert.equal((await saved(breaker)).client_denials, 0);
});

test("savingsIntervalMs 0 counts nothing", async () => {
  const breaker = `${prefix}:off`;
  await forceOpen(breaker);
  const c = await watching(breaker, new Wire(), { savingsIntervalMs: 0 });
  assert.equal((await c.allow(breaker)).allowed, false);
  assert.equal(c.savings.pending().size, 0);
  await c.close();
});

/** recorder is a send that records each batch, or fails as told. */
function recorder() {
  const r = {
    batches: [] as SavingsReport[][],
    fail: undefined as unknown,
    send: async (batch: SavingsReport[]) => {
      if (r.fail !== undefined) throw r.fail;
      r.batches.push(batch);
    },
  };
  return r;
}

test("batches hold at most 1,024 breakers, counts at most a million each", async () => {
  const rec = recorder();
  const s = new Savings(rec.send, 3_600_000); // never started: this test flushes
  for (let i = 0; i <= MAX_SAVINGS_BATCH; i++) s.add(`b${i}`, 1, 0);
  s.add("b0", MAX_SAVINGS_COUNT, 0); // b0 holds MAX_SAVINGS_COUNT + 1
  assert.equal(await s.flush(), true);
  assert.deepEqual(rec.batches.map((b) => b.length), [MAX_SAVINGS_BATCH, 2]);
  const counts = new Map<string, number>();
  for (const batch of rec.batches) {
    assert.equal(new Set(batch.map((r) => r.breaker)).size, batch.length, "one report per breaker");
    for (const r of batch) {
      const n = Number(r.local_denials);
      assert.ok(n > 0 && n <= MAX_SAVINGS_COUNT);
      counts.set(r.breaker, (counts.get(r.breaker) ?? 0) + n);
    }
  }
  assert.equal(counts.get("b0"), MAX_SAVINGS_COUNT + 1);
  assert.equal([...counts.values()].reduce((a, b) => a + b), MAX_SAVINGS_COUNT + MAX_SAVINGS_BATCH + 1);
});

test("unsent counts cover at most 10,000 breakers; a refusal is dropped", async () => {
  const rec = recorder();
  const s = new Savings(rec.send, 3_600_000);
  rec.fail = new UnreachableError("no daemon", []);
  for (let i = 0; i < MAX_SAVINGS_HELD + 5; i++) s.add(`b${i}`, 0, 1);
  s.add("b0", 0, 1);
  assert.equal(await s.flush(), false);
  assert.equal(s.pending().size, MAX_SAVINGS_HELD);
  assert.deepEqual(s.pending().get("b0"), { localDenials: 0, toolsRemoved: 2 });
  rec.fail = new APIError("permission_denied", "not yours", [], 403, "");
  await assert.rejects(s.flush(), APIError);
  assert.equal(s.pending().size, 0, "a refusal is not retried");
});

interface SavingsCase {
  name: string;
  open_cache: boolean;
  forced_open: string[];
  steps: {
    op: "allow" | "run" | "available" | "call";
    breaker?: string;
    tools?: ToolRef[];
    tool?: ToolRef;
    want_allowed?: boolean;
    want_available?: string[];
  }[];
  want: { breaker: string; local_denials: number; tools_removed: number }[];
}

const savingsCases = (JSON.parse(readFileSync(join(conformanceDir(), "savings.json"), "utf8")) as { cases: SavingsCase[] }).cases;

test("conformance/savings.json holds cases", () => assert.ok(savingsCases.length > 0, "no case"));

for (const [n, sc] of savingsCases.entries()) {
  test(`conformance/savings.json: ${sc.name}`, async () => {
    const named = (b: string) => `${prefix}:case${n}:${b}`;
    const ref = (t: ToolRef): ToolRef => ({ name: t.name, breaker: named(t.breaker ?? t.name) });
    for (const b of sc.forced_open) await forceOpen(named(b));
    const c = client(new Wire(), { workerId: "agent", watch: sc.open_cache });
    try {
      if (sc.open_cache) {
        await waitFor(() => c.openCache.status.connected && sc.forced_open.every((b) => c.openCache.lookup(named(b)) !== undefined), "every forced breaker in the live open cache");
      }
      let run: Run | undefined;
      for (const [i, step] of sc.steps.entries()) {
        const at = `step ${i} (${step.op})`;
        if (step.op === "allow") {
          assert.equal((await c.allow(named(step.breaker!))).allowed, step.want_allowed, at);
        } else if (step.op === "run" || step.op === "available") {
          if (step.op === "run" || !run) run = new Run(c);
          assert.deepEqual((await run.available(step.tools!.map(ref))).map((t) => t.name), step.want_available, at);
        } else if (step.op === "call") {
          let ran = false;
          await run!.guard(ref(step.tool!), () => (ran = true)).catch((err: unknown) => assert.ok(err instanceof CircuitOpenError, at));
          assert.equal(ran, step.want_allowed, at);
        } else {
          assert.fail(`${at}: unknown op`);
        }
      }
      assert.equal(await c.flushSavings(), true);
      for (const w of sc.want) {
        const got = await saved(named(w.breaker));
        assert.deepEqual({ local_denials: got.client_denials, tools_removed: got.tools_removed }, { local_denials: w.local_denials, tools_removed: w.tools_removed }, w.breaker);
      }
    } finally {
      await c.close();
    }
  });
}
