// Runs each example against a daemon built from this repository (its
// embedded Redis: a fresh fleet per example) and checks the story it
// prints; and holds docs/typescript.md's adopting diffs to the examples:
// every line a diff adds is in its example, marked "breakerd", and the
// example marks no other line.

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { main as agentsMain } from "./openai-agents.js";
import { main as aiMain } from "./vercel-ai.js";

const root = fileURLToPath(new URL("../../..", import.meta.url));

/** daemon starts breakerd (BREAKERD_BIN, else built from this tree) on ports the kernel picks. */
async function daemon(): Promise<{ url: string; stop: () => void }> {
  let bin = process.env["BREAKERD_BIN"];
  if (!bin) {
    bin = join(mkdtempSync(join(tmpdir(), "breakerd-example-")), "breakerd");
    execFileSync("go", ["build", "-o", bin, "./cmd/breakerd"], { cwd: root, stdio: "inherit" });
  }
  const child = spawn(bin, ["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-format", "json"], { stdio: ["ignore", "pipe", "pipe"] });
  const url = await new Promise<string>((resolve, reject) => {
    child.on("exit", (code) => reject(new Error(`breakerd exited (${code})`)));
    for (const s of [child.stdout, child.stderr]) {
      createInterface({ input: s }).on("line", (line) => {
        try {
          const rec = JSON.parse(line) as { msg?: string; addr?: string };
          if (rec.msg === "serving the HTTP/JSON API" && rec.addr) resolve(rec.addr);
        } catch {
          // not a log record
        }
      });
    }
  });
  return { url, stop: () => child.kill("SIGTERM") };
}

/** tell runs an example's main on a fresh daemon (BREAKERD_URL: the examples' Run reads it) and returns what it printed. */
async function tell(main: (log: (s: string) => void) => Promise<void>): Promise<string> {
  const d = await daemon();
  const lines: string[] = [];
  process.env["BREAKERD_URL"] = d.url;
  try {
    await main((s) => lines.push(s));
  } finally {
    d.stop();
  }
  return lines.join("\n");
}

function has(out: string, wants: string[]): void {
  for (const want of wants) assert.ok(out.includes(want), `output lacks ${JSON.stringify(want)}:\n${out}`);
}

const FAILURE = "refund_charge -> refund_charge failed (the failure is recorded). Calling it again right away";

test("Vercel AI SDK: the tool leaves the remaining steps of the request that trips it, and every later request", async () => {
  const out = await tell(aiMain);
  has(out, [
    "request 1 on worker-1:\n  step: the model is given web_search, refund_charge\n    refund_charge -> {\"ok\":true}",
    `request 3 on worker-1:\n  step: the model is given web_search, refund_charge\n    ${FAILURE}`,
    "request 4 on worker-2:\n",
    // the fifth failure, the second worker's second: the circuit opens, and the next step lacks the tool
    `  step: the model is given web_search, refund_charge\n    ${FAILURE}`,
    "  step: the model is given web_search, and the notice\n  notice given to the model:\n    | Some tools are out of service",
    "    | - refund_charge: it is failing: 5 failed calls in a row, last: server error (HTTP 503).",
    "request 8 on worker-2:\n  step: the model is given web_search, and the notice\n",
    "the payment vendor saw 7 requests",
  ]);
  const req4 = out.slice(out.indexOf("request 4 on"), out.indexOf("request 5 on"));
  assert.equal(req4.split(FAILURE).length - 1, 2, `request 4: two failures, then the tool left:\n${req4}`);
});

test("OpenAI Agents SDK: a failure reads as the shared text; the tool leaves the turns after the trip", async () => {
  const out = await tell(agentsMain);
  has(out, [
    "request 1 on worker-1:\n  turn: the model is given web_search, refund_charge\n    refund_charge -> {\"ok\":true}",
    `request 3 on worker-1:\n  turn: the model is given web_search, refund_charge\n    ${FAILURE}`,
    "  turn: the model is given web_search, and the notice\n",
    "request 8 on worker-2:\n  turn: the model is given web_search, and the notice\n",
    "the payment vendor saw 7 requests",
  ]);
  assert.ok(!out.includes("circuit_open"), `no call reached a denial: the tool left first:\n${out}`);
  const req4 = out.slice(out.indexOf("request 4 on"), out.indexOf("request 5 on"));
  assert.equal(req4.split(FAILURE).length - 1, 2, `request 4: two failures, then the tool left:\n${req4}`);
});

/** The adopting diffs of docs/typescript.md, by example: each block's added lines. */
function adoptingDiffs(): Map<string, string[]> {
  const doc = readFileSync(join(root, "docs", "typescript.md"), "utf8");
  const out = new Map<string, string[]>();
  for (const m of doc.matchAll(/<!-- adopting: (examples\/typescript\/[a-z-]+\.ts) -->\n```diff\n([\s\S]*?)```/g)) {
    out.set(m[1]!, m[2]!.split("\n").filter((l) => l.startsWith("+")).map((l) => l.slice(1).trim()));
  }
  return out;
}

test("docs/typescript.md's adopting diffs: at most 4 lines each, every one in its example, which marks no other", () => {
  const diffs = adoptingDiffs();
  assert.deepEqual([...diffs.keys()].sort(), ["examples/typescript/openai-agents.ts", "examples/typescript/vercel-ai.ts"]);
  for (const [file, added] of diffs) {
    const marked = readFileSync(join(root, file), "utf8").split("\n").filter((l) => l.endsWith(" // breakerd")).map((l) => l.trim().slice(0, -" // breakerd".length));
    assert.ok(added.length >= 1 && added.length <= 4, `${file}: ${added.length} lines`);
    assert.deepEqual(marked, added, `${file}: the lines marked breakerd are the doc's added lines`);
  }
});
