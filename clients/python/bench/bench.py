"""How fast the Python client is against a local daemon, beside the Go
client in the same run (docs/python.md, "Performance").

    clients/python/.venv/bin/python clients/python/bench/bench.py [--duration 2] [--redis-url redis://127.0.0.1:6379/0]

It builds breakerd from this repository, starts it on free loopback ports
(gRPC and HTTP/JSON), and measures with one caller, back to back:
Allow+Record pairs per second over keep-alive HTTP, guard around a
function that does nothing (calls per second, and its cost per call over
the bare function), then the Go client's pairs and Call over gRPC
(bench/gopairs) against the same daemon. Figures are printed, never
asserted: a busy machine changes them.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import breakerd

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rate(f: Callable[[], object], seconds: float) -> float:
    start = time.perf_counter()
    n = 0
    while time.perf_counter() - start < seconds:
        f()
        n += 1
    return n / (time.perf_counter() - start)


def start(binary: Path, redis_url: str) -> tuple[subprocess.Popen[bytes], str, str]:
    grpc, http = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    args = [str(binary), "--listen", grpc, "--http-listen", http, "--log-format", "json"]
    if redis_url:
        args += ["--redis-url", redis_url]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        if proc.poll() is not None:
            raise SystemExit("bench: breakerd exited at start")
        try:
            with urllib.request.urlopen(f"http://{http}/healthz", timeout=1):
                return proc, grpc, "http://" + http
        except OSError:
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per measurement")
    ap.add_argument("--redis-url", default="", help="the daemon's Redis; empty: its embedded one")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp())
    subprocess.run(["go", "build", "-o", str(tmp / "breakerd"), "./cmd/breakerd"], cwd=REPO, check=True)
    subprocess.run(["go", "build", "-o", str(tmp / "gopairs"), "./clients/python/bench/gopairs"], cwd=REPO, check=True)
    proc, grpc, url = start(tmp / "breakerd", args.redis_url)
    try:
        c = breakerd.Client(url, worker_id="bench-py", allow_budget=2.0, watch=False)

        def pair() -> None:
            c.record(c.allow("bench:py"))

        @c.guard("bench:py")
        def guarded() -> None:
            return None

        def bare() -> None:
            return None

        py_pairs = rate(pair, args.duration)
        py_guard = rate(guarded, args.duration)
        bare_rate = rate(bare, args.duration)
        overhead_us = (1 / py_guard - 1 / bare_rate) * 1e6
        out = subprocess.run([str(tmp / "gopairs"), "--addr", grpc, "--breaker", "bench:go", "--duration", f"{args.duration}s"],
                             check=True, capture_output=True, text=True).stdout
        go = json.loads(out)
        print(f"one caller, back to back, {args.duration:g}s each, daemon on {'Redis ' + args.redis_url if args.redis_url else 'its embedded Redis'}")
        print(f"{'':34}{'Python (HTTP/JSON)':>20}{'Go (gRPC)':>14}")
        print(f"{'Allow+Record pairs/s':34}{py_pairs:>20,.0f}{go['pairs_per_s']:>14,.0f}")
        print(f"{'guard / Call around a no-op, /s':34}{py_guard:>20,.0f}{go['call_per_s']:>14,.0f}")
        print(f"{'guard cost per call':34}{overhead_us:>18,.0f}us{1e6 / go['call_per_s']:>12,.0f}us")
        print(f"Python/Go pairs ratio: {py_pairs / go['pairs_per_s']:.2f}")
    finally:
        proc.terminate()
        proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
