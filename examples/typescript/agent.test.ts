// Runs the example against a daemon built from this repository (its
// embedded Redis: a fresh fleet) and checks the story it prints.

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { main } from "./agent.js";

/** daemon starts breakerd (BREAKERD_BIN, else built from this tree) on ports the kernel picks. */
async function daemon(): Promise<{ url: string; stop: () => void }> {
  let bin = process.env["BREAKERD_BIN"];
  if (!bin) {
    bin = join(mkdtempSync(join(tmpdir(), "breakerd-example-")), "breakerd");
    execFileSync("go", ["build", "-o", bin, "./cmd/breakerd"], { cwd: fileURLToPath(new URL("../../..", import.meta.url)), stdio: "inherit" });
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

test("the agent's tools before and after the trip", async () => {
  const d = await daemon();
  const lines: string[] = [];
  try {
    await main(["--url", d.url], (s) => lines.push(s));
  } finally {
    d.stop();
  }
  const out = lines.join("\n");
  for (const want of [
    "run 1 on worker-1: tools given to the model: web_search, refund_charge",
    "model calls refund_charge -> HTTP 503",
    "run 8 on worker-2: tools given to the model: web_search\n",
    "    | - refund_charge: it is failing: 5 failed calls in a row, last: server error (HTTP 503).",
    "In your final answer, say which parts of the task could not be done",
    "the payment vendor saw 7 requests",
  ]) {
    assert.ok(out.includes(want), `output lacks ${JSON.stringify(want)}:\n${out}`);
  }
});
