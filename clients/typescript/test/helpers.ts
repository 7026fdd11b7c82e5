// Test helpers: small HTTP servers of the test's own, a clock the test
// moves, and a wait on a condition (never on a wall-time margin).

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** DEAD_URL is a daemon URL nothing listens on (port 2: privileged, unused, and not one fetch refuses to dial). */
export const DEAD_URL = "http://127.0.0.1:2";

/** Served is a running test server. */
export interface Served {
  url: string;
  /** Requests served, by path. */
  hits: Map<string, number>;
  close(): Promise<void>;
}

/** serve starts an HTTP server on a free loopback port with handler h. */
export async function serve(h: (req: IncomingMessage, res: ServerResponse, body: string) => void): Promise<Served> {
  const hits = new Map<string, number>();
  const srv: Server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => (body += c));
    req.on("end", () => {
      const path = new URL(req.url ?? "/", "http://x").pathname;
      hits.set(path, (hits.get(path) ?? 0) + 1);
      h(req, res, body);
    });
  });
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const port = (srv.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    hits,
    close: () =>
      new Promise<void>((resolve) => {
        srv.closeAllConnections();
        srv.close(() => resolve());
      }),
  };
}

/** json answers a JSON body. */
export function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

/** Clock is a clock the test moves. */
export class Clock {
  constructor(public ms = 1_700_000_000_000) {}
  readonly now = (): number => this.ms;
  advance(ms: number): void {
    this.ms += ms;
  }
}

/** BOUND_MS is how long a test waits on the network before it fails: a hang's bound, not a margin any test relies on. */
export const BOUND_MS = 30_000;

/** within settles as p does, or fails after limitMs saying what the test waited for. */
export async function within<T>(what: string, p: Promise<T>, limitMs = BOUND_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_resolve, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${limitMs}ms waiting for ${what}`)), limitMs);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** waitFor polls cond until it holds, or fails after limitMs (a hung cond included) saying what it waited for. */
export async function waitFor(cond: () => boolean | Promise<boolean>, what: string, limitMs = BOUND_MS): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await within(what, Promise.resolve(cond()), Math.max(end - Date.now(), 1)))) {
    if (Date.now() > end) throw new Error(`timed out after ${limitMs}ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** repoRoot is the repository's root (tests run from build/test). */
export function repoRoot(): string {
  return new URL("../../../../", import.meta.url).pathname.replace(/\/$/, "");
}

/** conformanceDir is conformance/ at the repository root (CONFORMANCE_DIR overrides it). */
export function conformanceDir(): string {
  return process.env["CONFORMANCE_DIR"] ?? `${repoRoot()}/conformance`;
}
