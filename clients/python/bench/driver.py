"""The Python client's driver for breakerbench: healthy Allow+Record pairs
against one daemon's HTTP/JSON API, from threads or asyncio tasks, for a
time; one JSON line on stdout says what it did. cmd/breakerbench runs it
for its rows pair-1k-py* (docs/performance.md, "The clients' rows"); it
needs nothing but the client's source beside it (clients/python/src).

    python3 clients/python/bench/driver.py --url http://127.0.0.1:7071 \\
        --mode strict --callers 16 [--async] --duration 2 --breakers 1000 --prefix bench-1/

Flags:
  --url URL          the daemon's HTTP/JSON base URL (required)
  --mode MODE        strict (every Allow and Record is a request) or fast
                     (the client's fast mode); default strict
  --callers N        concurrent callers: threads, or with --async asyncio
                     tasks on one event loop; default 1
  --async            use AsyncClient from asyncio tasks instead of Client
                     from threads
  --duration S       seconds of timed calls, after an untimed warm-up
  --warmup S         seconds of untimed calls first (connections, imports,
                     the breakers' first Allow); default 0.2
  --breakers N       breakers the callers cycle over: <prefix>b0000 ...;
                     default 1000
  --prefix P         put in front of every breaker name; default ""
  --workers N        distinct worker ids (one client each, caller c uses
                     client c % N); default 8
  --min-ops N        keep calling past --duration until N pairs have
                     completed or failed (a tiny run still shows one);
                     default 0
  --await-start      once the warm-up is over, print the started line and
                     wait for a line on stdin (or its end) before the
                     timed run starts: the bench reads its counters in
                     between, so none of the timed calls come before

Output: the line {"started": true} when the warm-up is over and the timed
run starts (the bench reads its counters then; see --await-start), and
when it is over one line of JSON, then exit status 0:
  {"ops": 1234, "errors": 0, "elapsed_s": 2.001, "requests": 2468,
   "cpu_s": 0.8, "lat_us": [812, 790, ...]}
    ops       pairs that completed allowed, with their Record accepted
    errors    pairs that failed, were denied, or were answered by the
              client's fallback (degraded) instead of the daemon
    elapsed_s the timed run's wall time
    requests  HTTP requests the timed pairs sent, as the driver counts
              them: two per strict pair, none for a fast pair answered
              in-process
    cpu_s     the driver's CPU time (user and system, every thread) over
              the timed run: cpu_s / (ops + errors) is a pair's cost in
              the client, which a busy machine does not inflate as it
              does the wall time
    lat_us    every completed pair's latency, microseconds
A usage error exits 2; a failure exits 1 with {"error": "..."}.

Watch (--watch, instead of --duration): one fast client whose view
follows the breakers the bench names, one per line on stdin. For each,
the view learns it (an Allow, then its Record, until an Allow is answered
in-process and allowed), the driver prints {"ready": "<name>"}, then polls
the in-process Allow every 100 µs until it denies and prints
{"denied": "<name>", "at_us": <Unix time in µs>}. The bench trips the
breaker on another daemon between the two lines: at_us less the trip's
send is how long the trip took to reach this view (docs/performance.md,
"Trip to a client's fast view"). At the end of stdin it prints
{"trips": <count>} and exits 0.

Fast mode: fast_client and fast_async_client below return the client's
fast mode, its view live before the run starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import breakerd  # noqa: E402  (after the path to the client's source)

def client_options(worker: str) -> dict[str, Any]:
    """The options of every client the driver makes: a budget far above a
    loaded machine's round trip (an answer from the fallback counts as an
    error, not as a pair), no watch stream, no savings reports (a
    background write of their own)."""
    return {"worker_id": worker, "allow_budget": 10.0, "rpc_timeout": 10.0, "watch": False, "savings_interval": 0}


def fast_client(url: str, worker: str) -> breakerd.Client:
    """fast_client is worker's client in fast mode, its view live (its
    stream's snapshot heard)."""
    c = breakerd.Client(url, fast=True, **client_options(worker))
    if not c.cache.wait_live(10):
        c.close()
        raise RuntimeError("the fast view's stream did not go live within 10s")
    return c


def fast_async_client(url: str, worker: str) -> breakerd.AsyncClient:
    """fast_async_client is fast_client for asyncio."""
    return breakerd.AsyncClient.of(fast_client(url, worker))


class Tally:
    """Tally is one caller's count: latencies of completed pairs, errors,
    and the calls its timed pairs sent to breakerd."""

    def __init__(self) -> None:
        self.lat_us: list[int] = []
        self.errors = 0
        self.sent = 0


class Callers:
    """Callers paces every caller of one run: which breaker each calls
    next, when the run ends, and each one's tally; the latencies are the
    timed run's (duration seconds after warmup seconds, and after the
    bench's line when await_start), and the run goes on past duration
    until min_ops pairs are done."""

    def __init__(self, n: int, breakers: list[str], warmup: float, duration: float, min_ops: int, await_start: bool) -> None:
        self.tallies = [Tally() for _ in range(n)]
        self.breakers = breakers
        self.start = time.perf_counter() + warmup
        self.duration = duration
        self.end = self.start + duration
        self.min_ops = min_ops
        self.await_start = await_start
        self.cpu: float | None = None  # the process's CPU time when the timed run began
        self.elapsed = 0.0  # the timed run's wall time, and its CPU time (stop)
        self.cpu_s = 0.0
        self._begin_lock = threading.Lock()

    def finished(self) -> int:
        return sum(len(t.lat_us) + t.errors for t in self.tallies)

    def next(self, c: int, i: int) -> tuple[float, str] | None:
        """next is caller c's i-th call: its start time and breaker, or None
        when the run is over."""
        t0 = time.perf_counter()
        if self.cpu is None and t0 >= self.start:
            self._begin()
            t0 = time.perf_counter()
        if t0 >= self.end and self.finished() >= self.min_ops:
            return None
        return t0, self.breakers[(c * 7919 + i) % len(self.breakers)]

    def _begin(self) -> None:
        """_begin starts the timed run, once: it prints the started line
        and, with await_start, waits for the bench's line. Every other
        caller waits meanwhile: threads on the lock, tasks because the
        loop's one thread is held."""
        with self._begin_lock:
            if self.cpu is not None:
                return
            print(json.dumps({"started": True}), flush=True)
            if self.await_start:
                sys.stdin.readline()
            self.start = time.perf_counter()
            self.end = self.start + self.duration
            self.cpu = time.process_time()

    def done(self, c: int, t0: float, ok: bool, sent: int) -> None:
        if t0 < self.start:
            return
        t = self.tallies[c]
        t.sent += sent
        if ok:
            t.lat_us.append(int((time.perf_counter() - t0) * 1e6))
        else:
            t.errors += 1

    def stop(self) -> None:
        """stop ends the timed run (its wall and CPU time), once every
        caller has returned and before the clients close."""
        now, cpu = time.perf_counter(), time.process_time()
        self.elapsed = now - self.start
        self.cpu_s = cpu - (self.cpu if self.cpu is not None else cpu)


def names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}b{i:04d}" for i in range(n)]


def sent_of(permit: breakerd.Permit, recorded: dict[str, Any]) -> int:
    """sent_of is how many calls of one pair went to breakerd: fast mode
    answers an Allow in-process and leaves out a success that could
    change nothing."""
    return (0 if permit.fast else 1) + (0 if recorded.get("note") == breakerd.FAST_NOT_SENT else 1)


def pair_ok(permit: breakerd.Permit) -> bool:
    return permit.allowed and not permit.degraded


def run_threads(clients: list[breakerd.Client], run: Callers) -> None:
    """run_threads runs run's callers as threads until it is over."""

    def caller(c: int) -> None:
        cl, i = clients[c % len(clients)], 0
        while (call := run.next(c, i)) is not None:
            t0, name = call
            i += 1
            try:
                p = cl.allow(name)
                ok = pair_ok(p)
                sent = sent_of(p, cl.record(p))
            except breakerd.BreakerdError:
                ok, sent = False, 2
            run.done(c, t0, ok, sent)

    threads = [threading.Thread(target=caller, args=(c,)) for c in range(len(run.tallies))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    run.stop()


async def run_tasks(clients: list[breakerd.AsyncClient], run: Callers) -> None:
    """run_tasks is run_threads with asyncio tasks on one event loop."""

    async def caller(c: int) -> None:
        cl, i = clients[c % len(clients)], 0
        while (call := run.next(c, i)) is not None:
            t0, name = call
            i += 1
            try:
                p = await cl.allow(name)
                ok = pair_ok(p)
                sent = sent_of(p, await cl.record(p))
            except breakerd.BreakerdError:
                ok, sent = False, 2
            run.done(c, t0, ok, sent)

    await asyncio.gather(*(caller(c) for c in range(len(run.tallies))))
    run.stop()


def measure(a: argparse.Namespace) -> dict[str, Any]:
    breakers = names(a.prefix, a.breakers)
    workers = [f"bench-py-w{w}" for w in range(a.workers)]
    # No daemon answering there is a failure, not a run of errors.
    with breakerd.Client(a.url, **client_options(workers[0])) as probe:
        probe.check()
    if a.use_async:
        return asyncio.run(measure_async(a, breakers, workers))
    clients: list[breakerd.Client] = []
    try:
        for w in workers:
            c = fast_client(a.url, w) if a.mode == "fast" else breakerd.Client(a.url, **client_options(w))
            clients.append(c)
        if a.mode == "fast":
            for c in clients:  # each view learns every breaker first: a first use asks breakerd
                for b in breakers:
                    c.record(c.allow(b))
        run = Callers(a.callers, breakers, a.warmup, a.duration, a.min_ops, a.await_start)
        run_threads(clients, run)
    finally:
        for c in clients:
            c.close()
    return result(a, run)


async def measure_async(a: argparse.Namespace, breakers: list[str], workers: list[str]) -> dict[str, Any]:
    clients: list[breakerd.AsyncClient] = []
    try:
        for w in workers:
            c = fast_async_client(a.url, w) if a.mode == "fast" else breakerd.AsyncClient(a.url, **client_options(w))
            clients.append(c)
        if a.mode == "fast":
            for c in clients:  # each view learns every breaker first: a first use asks breakerd
                for b in breakers:
                    await c.record(await c.allow(b))
        run = Callers(a.callers, breakers, a.warmup, a.duration, a.min_ops, a.await_start)
        await run_tasks(clients, run)
    finally:
        for c in clients:
            await c.close()
    return result(a, run)


WATCH_POLL = 0.0001  # seconds between two in-process Allows of a watched breaker
WATCH_WAIT = 10.0  # seconds a watched breaker may take to be learned, or to deny


def watch(a: argparse.Namespace) -> dict[str, Any]:
    """watch follows the breakers named on stdin (see --watch above)."""
    trips = 0
    with fast_client(a.url, "bench-py-watcher") as c:
        for line in sys.stdin:
            name = line.strip()
            if name:
                learn(c, name)
                print(json.dumps({"ready": name}), flush=True)
                print(json.dumps({"denied": name, "at_us": until_denied(c, name)}), flush=True)
                trips += 1
    return {"trips": trips}


def learn(c: breakerd.Client, name: str) -> None:
    """learn returns once c's view answers name in-process, allowed."""
    give_up = time.monotonic() + WATCH_WAIT
    while True:
        p = c.allow(name)
        c.record(p)
        if p.fast and p.allowed:
            return
        if time.monotonic() > give_up:
            raise RuntimeError(f"the fast view never answered {name} in-process within {WATCH_WAIT}s")
        time.sleep(0.001)


def until_denied(c: breakerd.Client, name: str) -> int:
    """until_denied polls name's Allow until it denies; it returns when the
    denial was seen, in Unix µs."""
    give_up = time.monotonic() + WATCH_WAIT
    while c.allow(name).allowed:
        if time.monotonic() > give_up:
            raise RuntimeError(f"{name} still allowed {WATCH_WAIT}s after the view learned it")
        time.sleep(WATCH_POLL)
    return time.time_ns() // 1000


def result(a: argparse.Namespace, run: Callers) -> dict[str, Any]:
    lat = [x for t in run.tallies for x in t.lat_us]
    out: dict[str, Any] = {"ops": len(lat), "errors": sum(t.errors for t in run.tallies), "elapsed_s": round(run.elapsed, 6)}
    out["requests"] = sum(t.sent for t in run.tallies)
    out["cpu_s"] = round(run.cpu_s, 6)
    out["lat_us"] = lat
    return out


def positive_int(v: str) -> int:
    x = int(v)
    if x <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {v}")
    return x


def positive_float(v: str) -> float:
    x = float(v)
    if x <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {v}")
    return x


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--mode", choices=["strict", "fast"], default="strict")
    ap.add_argument("--callers", type=positive_int, default=1)
    ap.add_argument("--async", dest="use_async", action="store_true")
    ap.add_argument("--duration", type=positive_float)
    ap.add_argument("--watch", action="store_true")
    ap.add_argument("--warmup", type=float, default=0.2)
    ap.add_argument("--breakers", type=positive_int, default=1000)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--workers", type=positive_int, default=8)
    ap.add_argument("--min-ops", type=int, default=0)
    ap.add_argument("--await-start", action="store_true")
    a = ap.parse_args(argv)
    if (a.duration is None) == (not a.watch):
        ap.error("give --duration, or --watch")
    try:
        out = watch(a) if a.watch else measure(a)
    except Exception as e:  # noqa: BLE001  (reported to the bench, which names the row)
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    print(json.dumps(out, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
