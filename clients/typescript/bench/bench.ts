// npm run bench: what the TypeScript client costs over keep-alive HTTP,
// against a daemon built from this tree on the shared Redis
// (BREAKERD_TEST_REDIS_ADDR, default 127.0.0.1:6379):
//  - guarded pairs per second (allow + record through guard) from 16
//    concurrent callers over 1,000 breakers;
//  - guard's overhead per call: one caller's guarded pair beside the same
//    two requests sent with bare fetch;
// then the Go client's pair figures from breakerbench on the same machine
// (`--no-go` skips them). Figures are printed, never asserted.

import { execFileSync } from "node:child_process";
import { parseArgs } from "node:util";

import { Client } from "../src/index.js";
import { repoRoot } from "../test/helpers.js";
import { startDaemon, uniq } from "../test/daemon.js";

const { values } = parseArgs({ options: { seconds: { type: "string", default: "3" }, callers: { type: "string", default: "16" }, "no-go": { type: "boolean", default: false } } });
const seconds = Number(values.seconds);
const callers = Number(values.callers);

async function rawPair(url: string, breaker: string): Promise<void> {
  const post = async (method: string, body: unknown) => {
    const res = await fetch(`${url}/breakerd.v1.BreakerService/${method}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`${method}: HTTP ${res.status}`);
    return (await res.json()) as { ticket?: unknown };
  };
  const a = await post("Allow", { breaker, worker_id: "raw" });
  await post("Record", { breaker, worker_id: "raw", ticket: a.ticket, evidence: {} });
}

/** perCall times n sequential calls of f, µs each (the median of 5 rounds). */
async function perCall(n: number, f: (i: number) => Promise<unknown>): Promise<number> {
  const rounds: number[] = [];
  for (let r = 0; r < 5; r++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < n; i++) await f(i);
    rounds.push(Number(process.hrtime.bigint() - start) / 1000 / n);
  }
  return rounds.sort((a, b) => a - b)[2]!;
}

async function main(): Promise<void> {
  const daemon = await startDaemon();
  const prefix = uniq();
  const names = Array.from({ length: 1000 }, (_, i) => `${prefix}:b${i}`);
  try {
    const client = new Client({ urls: daemon.url, workerId: "bench", allowBudgetMs: 5000 });
    await perCall(200, (i) => client.guard(names[i % names.length]!, () => i)); // warm the connections
    const raw = await perCall(500, (i) => rawPair(daemon.url, names[i % names.length]!));
    const guarded = await perCall(500, (i) => client.guard(names[i % names.length]!, () => i));
    let pairs = 0;
    const until = Date.now() + seconds * 1000;
    await Promise.all(
      Array.from({ length: callers }, async (_, c) => {
        for (let i = c; Date.now() < until; i += callers) {
          await client.guard(names[i % names.length]!, () => i);
          pairs++;
        }
      }),
    );
    console.log(`typescript client (Node ${process.versions.node}, HTTP/1.1 keep-alive, ${callers} callers, 1,000 breakers):`);
    console.log(`  guarded pairs/s            ${Math.round(pairs / seconds)}`);
    console.log(`  one caller: bare fetch pair ${raw.toFixed(0)} µs, guard ${guarded.toFixed(0)} µs, overhead ${(guarded - raw).toFixed(0)} µs per call`);
  } finally {
    await daemon.stop();
  }
  if (values["no-go"]) return;
  console.log("go client, same machine (go run ./cmd/breakerbench --quick --only pair-1k):");
  const out = execFileSync("go", ["run", "./cmd/breakerbench", "--quick", "--only", "pair-1k"], { cwd: repoRoot(), encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  for (const line of out.split("\n")) if (/pair-1k/.test(line)) console.log("  " + line.trim());
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
