// A Client given no urls or token takes them from BREAKERD_URL and
// BREAKERD_TOKEN; options given win; neither given is a ConfigError naming
// both. The fake daemon counts what reaches it and the token it carried.

import assert from "node:assert/strict";
import { test } from "node:test";
import { Client, ConfigError } from "../src/index.js";
import { DEAD_URL, json, serve, type Served } from "./helpers.js";

/** daemon answers every call with a breaker's state and keeps each call's Authorization header. */
async function daemon(t: { after(fn: () => Promise<void>): void }): Promise<Served & { auth: (string | undefined)[] }> {
  const auth: (string | undefined)[] = [];
  const s = await serve((req, res) => {
    auth.push(req.headers.authorization);
    json(res, 200, { state: { breaker: "payments", state: "STATE_CLOSED" } });
  });
  t.after(() => s.close());
  return Object.assign(s, { auth });
}

/** withEnv sets the variables for fn, then restores them. */
async function withEnv(vars: Record<string, string | undefined>, fn: () => Promise<void>): Promise<void> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const set = (v: Record<string, string | undefined>) => {
    for (const [k, x] of Object.entries(v)) if (x === undefined) delete process.env[k];
    else process.env[k] = x;
  };
  set(vars);
  try {
    await fn();
  } finally {
    set(saved);
  }
}

const quiet = { watch: false, savingsIntervalMs: 0, workerId: "w-env" } as const;

test("a Client without urls or token reads BREAKERD_URL and BREAKERD_TOKEN", async (t) => {
  const d = await daemon(t);
  await withEnv({ BREAKERD_URL: `${DEAD_URL}, ${d.url}`, BREAKERD_TOKEN: "token-from-env" }, async () => {
    const c = new Client(quiet);
    await c.get("payments");
    await c.close();
  });
  assert.equal(d.hits.get("/breakerd.v1.BreakerService/Get"), 1);
  assert.deepEqual(d.auth, ["Bearer token-from-env"]);
});

test("options given win over the environment; token \"\" is none", async (t) => {
  const d = await daemon(t);
  await withEnv({ BREAKERD_URL: DEAD_URL, BREAKERD_TOKEN: "token-from-env" }, async () => {
    for (const token of ["token-given", ""]) {
      const c = new Client({ ...quiet, urls: d.url, token });
      await c.get("payments");
      await c.close();
    }
  });
  assert.deepEqual(d.auth, ["Bearer token-given", undefined]);
});

test("a Client with neither urls nor BREAKERD_URL is a ConfigError naming both", async () => {
  await withEnv({ BREAKERD_URL: undefined }, async () => {
    assert.throws(() => new Client(quiet), (e: unknown) => e instanceof ConfigError && e.field === "urls" && /BREAKERD_URL is not set/.test(e.message));
  });
  await withEnv({ BREAKERD_URL: "ftp://x" }, async () => {
    assert.throws(() => new Client(quiet), ConfigError);
  });
});
