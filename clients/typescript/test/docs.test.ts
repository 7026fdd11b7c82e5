// docs/typescript.md's quick start, read from the page and run as a user
// would: the block is written to a fresh folder that has this package
// installed, type-checked with the package's compiler under --strict, and
// run by node against a real daemon (its two URLs replaced by the test's
// daemon and a vendor of the test's own).

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";

import { startDaemon, uniq } from "./daemon.js";
import { repoRoot, serve } from "./helpers.js";

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
  const vendor = await serve((_req, res) => {
    res.writeHead(503, { "retry-after": "1" });
    res.end("down");
  });
  t.after(() => vendor.close());
  const dir = mkdtempSync(join(tmpdir(), "breakerd-ts-docs-"));
  mkdirSync(join(dir, "node_modules", "@breakerd"), { recursive: true });
  symlinkSync(join(repoRoot(), "clients", "typescript"), join(dir, "node_modules", "@breakerd", "client"));
  writeFileSync(join(dir, "package.json"), '{"type":"module"}\n');
  const breaker = `${uniq()}:payments`;
  const code = quickStart()
    .replace("http://127.0.0.1:7071", daemon.url)
    .replace("http://127.0.0.1:8080/refund", `${vendor.url}/refund`)
    .replace('"payments"', JSON.stringify(breaker));
  writeFileSync(join(dir, "quickstart.ts"), code);
  writeFileSync(join(dir, "quickstart.mjs"), code);
  const tsc = join(repoRoot(), "clients", "typescript", "node_modules", ".bin", "tsc");
  await run(tsc, ["--strict", "--noEmit", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--lib", "es2022,dom", "quickstart.ts"], { cwd: dir });
  const first = await run(process.execPath, ["quickstart.mjs"], { cwd: dir });
  assert.equal(first.stdout, "payments answered 503\n");
  assert.equal(vendor.hits.get("/refund"), 1);
  // A second worker's failure trips the breaker (threshold 5 by default: three more from it).
  for (let i = 0; i < 4; i++) {
    writeFileSync(join(dir, "quickstart.mjs"), code.replace('"worker-1"', `"worker-${2 + (i % 2)}"`));
    await run(process.execPath, ["quickstart.mjs"], { cwd: dir });
  }
  const last = await run(process.execPath, ["quickstart.mjs"], { cwd: dir });
  assert.match(last.stdout, /^\{"status":"circuit_open","tool":"refund_charge","reason":/);
  assert.ok(!last.stdout.includes(breaker), "the model reads the tool's name, not the breaker's");
  assert.equal(vendor.hits.get("/refund"), 5, "the open breaker kept the sixth call from the vendor");
});
