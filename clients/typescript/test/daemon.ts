// Real daemons for the tests: the breakerd binary built from this
// repository (npm's pretest builds it into build/breakerd; BREAKERD_BIN
// names another), started on ports the kernel picks (read back from its
// log), on the real Redis at BREAKERD_TEST_REDIS_ADDR (default
// 127.0.0.1:6379) or an embedded one.

import { spawn, type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

import { repoRoot, waitFor } from "./helpers.js";

/** binary is the breakerd binary the tests run. */
export function binary(): string {
  return process.env["BREAKERD_BIN"] ?? join(repoRoot(), "clients", "typescript", "build", "breakerd");
}

/** redisURL is the shared Redis the daemons use. */
export function redisURL(): string {
  return `redis://${process.env["BREAKERD_TEST_REDIS_ADDR"] ?? "127.0.0.1:6379"}/0`;
}

/** redisAnswers settles once per run: rejects, saying what is missing, when nothing listens at redisURL(). */
let redisCheck: Promise<void> | undefined;
function redisAnswers(): Promise<void> {
  const addr = process.env["BREAKERD_TEST_REDIS_ADDR"] ?? "127.0.0.1:6379";
  const i = addr.lastIndexOf(":");
  redisCheck ??= new Promise<void>((resolve, reject) => {
    const s = connect({ host: addr.slice(0, i), port: Number(addr.slice(i + 1)), timeout: 2000 });
    const fail = (why: string) => (s.destroy(), reject(new Error(`no Redis answers at ${addr} (${why}): start one ` +
      `(redis-server --port N) and set BREAKERD_TEST_REDIS_ADDR=127.0.0.1:N, or run scripts/test.sh typescript`)));
    s.on("connect", () => (s.end(), resolve())).on("timeout", () => fail("timeout")).on("error", (e) => fail(e.message));
  });
  return redisCheck;
}

/** uniq is a breaker-name prefix of this test's own: copies of the suite share Redis. */
export function uniq(): string {
  return `ts-${randomUUID().slice(0, 8)}`;
}

/** Daemon is a running breakerd. */
export interface Daemon {
  /** The HTTP/JSON API's base URL. */
  url: string;
  /** Its log so far (for failure messages). */
  log(): string;
  /** stop sends SIGTERM and waits for the exit. */
  stop(): Promise<void>;
  /** kill ends it at once (SIGKILL), as a crash would. */
  kill(): Promise<void>;
  /** pause stops it (SIGSTOP): it accepts connections and answers nothing, as a hung process. */
  pause(): void;
  /** resume continues a paused daemon (SIGCONT). */
  resume(): void;
}

export interface DaemonOptions {
  /** The policy file's YAML; none when absent. */
  policy?: string;
  /** Use an embedded Redis rather than the shared one. */
  embedded?: boolean;
  /** The tokens file's YAML (--tokens); none when absent. */
  tokens?: string;
  /** More flags. */
  args?: string[];
  /** More environment (OTEL_*, say), beside this process's. */
  env?: Record<string, string>;
  /** The daemon's TLS certificate and key (--tls-cert, --tls-key), from a CA this process does not trust: its health is read from its log. */
  tls?: { cert: string; key: string };
}

/** startDaemon starts breakerd and waits until its HTTP listener serves and its health is SERVING. */
export async function startDaemon(o: DaemonOptions = {}): Promise<Daemon> {
  if (!o.embedded) await redisAnswers();
  const dir = mkdtempSync(join(tmpdir(), "breakerd-ts-"));
  const args = ["--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--log-format", "json"];
  if (!o.embedded) args.push("--redis-url", redisURL());
  if (o.policy) {
    writeFileSync(join(dir, "policy.yaml"), o.policy);
    args.push("--config", join(dir, "policy.yaml"));
  }
  if (o.tokens) {
    writeFileSync(join(dir, "tokens.yaml"), o.tokens, { mode: 0o600 });
    args.push("--tokens", join(dir, "tokens.yaml"));
  }
  if (o.tls) args.push("--tls-cert", o.tls.cert, "--tls-key", o.tls.key);
  args.push(...(o.args ?? []));
  const child = spawn(binary(), args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...o.env } });
  const lines: string[] = [];
  let url = "";
  for (const stream of [child.stdout!, child.stderr!]) {
    createInterface({ input: stream }).on("line", (line) => {
      lines.push(line);
      try {
        const rec = JSON.parse(line) as { msg?: string; addr?: string };
        if (rec.msg === "serving the HTTP/JSON API" && rec.addr) url = rec.addr;
      } catch {
        // not a log record
      }
    });
  }
  let exited = false;
  const exit = new Promise<void>((resolve) => child.on("exit", () => ((exited = true), resolve())));
  const log = () => lines.join("\n");
  await waitFor(() => url !== "" || exited, "breakerd's HTTP listener").catch((e: Error) => {
    child.kill("SIGKILL");
    throw new Error(`${e.message}; log:\n${log()}`);
  });
  if (exited) throw new Error(`breakerd exited at start; log:\n${log()}`);
  const serving = o.tls ? async () => lines.some((l) => l.includes('"msg":"redis ready: health SERVING"')) : async () => (await fetch(`${url}/healthz`).then((r) => r.ok, () => false));
  await waitFor(async () => (await serving()) || exited, "breakerd SERVING");
  const send = (sig: NodeJS.Signals) => {
    if (!exited) child.kill(sig);
  };
  const end = async (sig: NodeJS.Signals) => {
    send("SIGCONT"); // a paused daemon takes no SIGTERM
    send(sig);
    await exit;
  };
  return { url, log, stop: () => end("SIGTERM"), kill: () => end("SIGKILL"), pause: () => send("SIGSTOP"), resume: () => send("SIGCONT") };
}

export type { ChildProcess };
