// docs/typescript.md's quick start, read from the page and run as a user
// would: the block is written to a fresh folder that has this package
// installed, type-checked with the package's compiler under --strict, and
// run by node against a real daemon (its URL replaced by the test's
// daemon's: nothing else is, so the block needs no vendor of its own).

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { startDaemon, uniq } from "./daemon.js";
import { repoRoot, within } from "./helpers.js";

const run = promisify(execFile);

/** quickStart is the page's first ts block. */
function quickStart(): string {
  const page = readFileSync(join(repoRoot(), "docs", "typescript.md"), "utf8");
  const m = /```ts\n([\s\S]*?)```/.exec(page);
  assert.ok(m, "docs/typescript.md has no ts block");
  const lines = m[1]!.trimEnd().split("\n");
  assert.ok(lines.length <= 12, `the quick start is ${lines.length} lines`);
  return m[1]!;
}

test("docs/typescript.md's quick start type-checks and runs", async (t) => {
  const daemon = await startDaemon();
  t.after(() => daemon.stop());
  const dir = mkdtempSync(join(tmpdir(), "breakerd-ts-docs-"));
  mkdirSync(join(dir, "node_modules", "@breakerd"), { recursive: true });
  symlinkSync(join(repoRoot(), "clients", "typescript"), join(dir, "node_modules", "@breakerd", "client"));
  writeFileSync(join(dir, "package.json"), '{"type":"module"}\n');
  const breaker = `${uniq()}:payments`;
  const block = quickStart();
  assert.equal(block.split("http://").length, 2, "the quick start calls one URL: the daemon's");
  const code = block.replace("http://127.0.0.1:7071", daemon.url).replace('"payments"', JSON.stringify(breaker));
  writeFileSync(join(dir, "quickstart.ts"), code);
  writeFileSync(join(dir, "quickstart.mjs"), code);
  const tsc = join(repoRoot(), "clients", "typescript", "node_modules", ".bin", "tsc");
  await run(tsc, ["--strict", "--noEmit", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--lib", "es2022,dom", "quickstart.ts"], { cwd: dir });
  const first = await run(process.execPath, ["quickstart.mjs"], { cwd: dir });
  assert.equal(first.stdout, "refunded ch_42\n");
  // An operator takes payments out of service: the same block prints the denial instead, and only it (refundCharge never ran).
  const res = await within("the daemon's Force", fetch(`${daemon.url}/breakerd.v1.BreakerService/Force`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ breaker, mode: "FORCE_MODE_OPEN", reason: "vendor maintenance", operator: "test" }),
  }));
  assert.equal(res.status, 200, await res.text());
  // On a busy host the daemon's answer may come after the client's
  // first-contact budget: the local fallback, which has not heard of the
  // Force, lets the call out. Such a run (the refund printed) is run
  // again; one of them must print the denial.
  let last = await run(process.execPath, ["quickstart.mjs"], { cwd: dir });
  for (let i = 0; i < 10 && last.stdout === "refunded ch_42\n"; i++) {
    last = await run(process.execPath, ["quickstart.mjs"], { cwd: dir });
  }
  assert.match(last.stdout, /^\{"status":"forced_open","tool":"refund_charge","reason":"forced open by an operator: vendor maintenance".*"forced":true\}\n$/, last.stderr);
  assert.ok(!last.stdout.includes(breaker), "the model reads the tool's name, not the breaker's");
});
