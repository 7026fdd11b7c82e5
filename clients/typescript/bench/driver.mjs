// The TypeScript client's driver for breakerbench: healthy allow+record
// pairs against one daemon's HTTP/JSON API from concurrent callers (async
// functions on one event loop) for a time; one JSON line on stdout says
// what it did. cmd/breakerbench runs it for its rows pair-1k-ts*
// (docs/performance.md, "The clients' rows"). It imports the built client
// (../dist: `npm run build`, committed), so it needs node and nothing else.
//
//   node clients/typescript/bench/driver.mjs --url http://127.0.0.1:7071 \
//       --mode strict --callers 16 --duration 2 --breakers 1000 --prefix bench-1/
//
// Flags (the Python driver's, clients/python/bench/driver.py; --async is
// accepted and changes nothing, every caller here is async):
//   --url URL         the daemon's HTTP/JSON base URL (required)
//   --mode MODE       strict (every allow and record is a request) or fast
//                     (the client's fast mode); default strict
//   --callers N       concurrent callers; default 1
//   --duration S      seconds of timed calls, after an untimed warm-up
//   --warmup S        seconds of untimed calls first; default 0.2
//   --warmup-pairs N  untimed pairs before those, so that V8 has compiled
//                     the client's code (this driver's own flag); default 0
//   --breakers N      breakers the callers cycle over: <prefix>b0000 ...;
//                     default 1000
//   --prefix P        put in front of every breaker name; default ""
//   --workers N       distinct worker ids (one client each, caller c uses
//                     client c % N); default 8
//   --min-ops N       keep calling past --duration until N pairs have
//                     completed or failed; default 0
//   --await-start     once the warm-up is over, print the started line and
//                     wait for a line on stdin (or its end) before the
//                     timed run starts: the bench reads its counters in
//                     between, so none of the timed calls come before
//
// Output: the line {"started": true} when the warm-up is over and the
// timed run starts (the bench reads its counters then; see
// --await-start), and when it is over one line of JSON, then exit
// status 0:
//   {"ops": 1234, "errors": 0, "elapsed_s": 2.001, "requests": 2468, "cpu_s": 0.8, "lat_us": [812, ...]}
// (ops: pairs completed allowed with their record accepted; errors: pairs
// failed, denied, or answered by the client's fallback (degraded);
// requests: HTTP requests the timed pairs sent, as the driver counts them:
// two per strict pair, none for a fast pair answered in-process;
// cpu_s: the driver's CPU time (user and system) over the timed run, so
// cpu_s / (ops + errors) is a pair's cost in the client, which a busy
// machine inflates less than the wall time;
// lat_us: every completed pair's latency in µs). A usage error exits 2;
// a failure exits 1 with {"error": "..."}.
//
// Watch (--watch, instead of --duration): as the Python driver's, one
// fast client's view follows the breakers named on stdin, printing
// {"ready": name} once it answers one in-process and allowed, then
// {"denied": name, "at_us": <Unix µs>} when its in-process allow first
// denies (polled on a 0 ms timer, which Node runs about every
// millisecond: a busier poll would take a core from the daemons on a
// small machine), and {"trips": n} at the end of stdin.
//
// Fast mode: fastClient below returns the client's fast mode, its view
// live before the run starts.

import { createInterface } from "node:readline";
import { parseArgs } from "node:util";

import { Client, FAST_NOT_SENT } from "../dist/index.js";

const STARTED = `{"started": true}\n`; // what the bench waits for (cmd/breakerbench/bench/drivers.go)

/**
 * clientOptions are the options of every client the driver makes: a
 * budget far above a loaded machine's round trip (an answer from the
 * fallback counts as an error, not as a pair), no watch stream, no
 * savings reports (a background write of their own), errors counted
 * rather than logged.
 */
function clientOptions(url, workerId) {
  return { urls: url, token: "", workerId, allowBudgetMs: 10_000, rpcTimeoutMs: 10_000, watch: false, savingsIntervalMs: 0, onError: () => {} };
}

/** fastClient is workerId's client in fast mode, its view live (its stream's snapshot heard). */
async function fastClient(url, workerId) {
  const c = new Client({ ...clientOptions(url, workerId), fast: true });
  for (let waited = 0; !c.openCache.status.connected; waited += 10) {
    if (waited >= 10_000) {
      await c.close();
      throw new Error("the fast view's stream did not go live within 10s");
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  return c;
}

function usage(msg) {
  process.stderr.write(`driver.mjs: ${msg}\n`);
  process.exit(2);
}

function positive(name, v, parse) {
  const x = parse(v);
  if (!(x > 0)) usage(`--${name}: must be above 0, got ${v}`);
  return x;
}

function options() {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        url: { type: "string" },
        mode: { type: "string", default: "strict" },
        callers: { type: "string", default: "1" },
        async: { type: "boolean", default: false },
        duration: { type: "string" },
        warmup: { type: "string", default: "0.2" },
        "warmup-pairs": { type: "string", default: "0" },
        breakers: { type: "string", default: "1000" },
        prefix: { type: "string", default: "" },
        workers: { type: "string", default: "8" },
        "min-ops": { type: "string", default: "0" },
        "await-start": { type: "boolean", default: false },
        watch: { type: "boolean", default: false },
      },
    }));
  } catch (err) {
    usage(err.message);
  }
  if (!values.url) usage("--url is required");
  if ((values.duration === undefined) !== values.watch) usage("give --duration, or --watch");
  if (values.watch) return { url: values.url, watch: true };
  if (values.mode !== "strict" && values.mode !== "fast") usage(`--mode: strict or fast, got ${values.mode}`);
  return {
    url: values.url,
    mode: values.mode,
    callers: positive("callers", values.callers, Number.parseInt),
    duration: positive("duration", values.duration, Number.parseFloat),
    warmup: Number.parseFloat(values.warmup),
    warmupPairs: Number.parseInt(values["warmup-pairs"]),
    breakers: positive("breakers", values.breakers, Number.parseInt),
    prefix: values.prefix,
    workers: positive("workers", values.workers, Number.parseInt),
    minOps: Number.parseInt(values["min-ops"]),
    awaitStart: values["await-start"],
  };
}

/**
 * run runs o.callers callers of pairs for warmup then duration seconds;
 * the latencies are the timed run's, whose start it prints unless quiet
 * (and, with o.awaitStart, delays until the bench's line).
 */
async function run(o, clients, quiet = false) {
  const names = Array.from({ length: o.breakers }, (_, i) => `${o.prefix}b${String(i).padStart(4, "0")}`);
  const now = () => Number(process.hrtime.bigint()) / 1e3; // µs
  let start = now() + o.warmup * 1e6;
  let end = start + o.duration * 1e6;
  const lat = [];
  let errors = 0;
  let requests = 0;
  let cpu0; // the process's CPU time when the timed run started
  let begun; // the timed run's start, which every caller past the warm-up awaits
  const begin = async () => {
    if (!quiet) {
      process.stdout.write(STARTED);
      if (o.awaitStart) await oneLine();
    }
    start = now();
    end = start + o.duration * 1e6;
    cpu0 = process.cpuUsage();
  };
  const caller = async (c) => {
    const cl = clients[c % clients.length];
    for (let i = c * 7919; ; i++) {
      let t0 = now();
      if (t0 >= start && cpu0 === undefined) {
        await (begun ??= begin());
        t0 = now();
      }
      if (t0 >= end && lat.length + errors >= o.minOps) return;
      let ok;
      let sent = 2; // calls this pair sent to breakerd: fast mode answers in-process and leaves out a success that changes nothing
      try {
        const p = await cl.allow(names[i % names.length]);
        ok = p.allowed && !p.degraded;
        const r = await cl.record(p, {});
        sent = (p.fast ? 0 : 1) + (r.why === FAST_NOT_SENT ? 0 : 1);
      } catch {
        ok = false;
      }
      if (t0 < start) continue;
      requests += sent;
      if (ok) lat.push(Math.round(now() - t0));
      else errors++;
    }
  };
  await Promise.all(Array.from({ length: o.callers }, (_, c) => caller(c)));
  const cpu = process.cpuUsage(cpu0);
  return { lat, errors, requests, elapsed: (now() - start) / 1e6, cpu: (cpu.user + cpu.system) / 1e6 };
}

/** oneLine returns once stdin has given a line, or ended. */
async function oneLine() {
  const lines = createInterface({ input: process.stdin });
  try {
    for await (const _ of lines) return;
  } finally {
    lines.close();
  }
}

const WATCH_WAIT_MS = 10_000; // how long a watched breaker may take to be learned, or to deny

/** watch follows the breakers named on stdin (see Watch above). */
async function watch(o) {
  const c = await fastClient(o.url, "bench-ts-watcher");
  let trips = 0;
  try {
    for await (const line of createInterface({ input: process.stdin })) {
      const name = line.trim();
      if (!name) continue;
      await learn(c, name);
      process.stdout.write(JSON.stringify({ ready: name }) + "\n");
      process.stdout.write(JSON.stringify({ denied: name, at_us: await untilDenied(c, name) }) + "\n");
      trips++;
    }
  } finally {
    await c.close();
  }
  return { trips };
}

/** learn returns once c's view answers name in-process, allowed. */
async function learn(c, name) {
  const giveUp = Date.now() + WATCH_WAIT_MS;
  for (;;) {
    const p = await c.allow(name);
    await c.record(p, {});
    if (p.fast && p.allowed) return;
    if (Date.now() > giveUp) throw new Error(`the fast view never answered ${name} in-process within ${WATCH_WAIT_MS} ms`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

/** untilDenied polls name's allow until it denies; it returns when the denial was seen, in Unix µs. */
async function untilDenied(c, name) {
  const giveUp = Date.now() + WATCH_WAIT_MS;
  while ((await c.allow(name)).allowed) {
    if (Date.now() > giveUp) throw new Error(`${name} still allowed ${WATCH_WAIT_MS} ms after the view learned it`);
    await new Promise((r) => setTimeout(r, 0));
  }
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

async function main() {
  const o = options();
  if (o.watch) return watch(o);
  const workers = Array.from({ length: o.workers }, (_, w) => `bench-ts-w${w}`);
  // No daemon answering there is a failure, not a run of errors.
  const probe = new Client(clientOptions(o.url, workers[0]));
  try {
    await probe.check();
  } finally {
    await probe.close();
  }
  const clients = [];
  try {
    for (const w of workers) {
      const c = o.mode === "fast" ? await fastClient(o.url, w) : new Client(clientOptions(o.url, w));
      clients.push(c);
    }
    if (o.mode === "fast") {
      // Each view learns every breaker first: a first use asks breakerd.
      const names = Array.from({ length: o.breakers }, (_, i) => `${o.prefix}b${String(i).padStart(4, "0")}`);
      for (const c of clients) for (const b of names) await c.record(await c.allow(b), {});
    }
    if (o.warmupPairs > 0) await run({ ...o, warmup: 0, duration: 1e-6, minOps: o.warmupPairs }, clients, true);
    const { lat, errors, requests, elapsed, cpu } = await run(o, clients);
    const out = { ops: lat.length, errors, elapsed_s: Number(elapsed.toFixed(6)) };
    out.requests = requests;
    out.cpu_s = Number(cpu.toFixed(6));
    out.lat_us = lat;
    return out;
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
}

main().then(
  (out) => process.stdout.write(JSON.stringify(out) + "\n"),
  (err) => {
    process.stdout.write(JSON.stringify({ error: String(err?.message ?? err) }) + "\n");
    process.exit(1);
  },
);
