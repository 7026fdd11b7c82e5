"""What the Python examples share: the payment vendor that goes down, the
runs of the story, and a daemon to talk to (started when none answers).
Not part of any adoption: each example's agent code is in its own file."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

# The policy of a daemon an example starts: the alternative the model is
# offered while payments is out.
POLICY = """breakers:
  - match: "*payments"
    alternatives: [issue_refund_manually]
"""

# The runs after the vendor goes down, and the worker each runs on: two
# workers of one fleet.
RUNS_DOWN = ((2, "worker-2"), (3, "worker-1"), (4, "worker-2"), (5, "worker-1"), (6, "worker-2"), (7, "worker-1"))

# What the scripted model answers once refund_charge is gone.
GIVEN_UP = "I could not refund ch_42: payments is out of service; use issue_refund_manually instead."


class Vendor:
    """The payment vendor: up until it goes down, then every call is a
    503."""

    def __init__(self) -> None:
        self.down = False
        self.calls = 0

    def refund(self, charge_id: str) -> str:
        self.calls += 1
        if self.down:
            httpx.Response(503, request=httpx.Request("POST", "https://payments.example/refunds")).raise_for_status()
        return f'{{"ok":true,"refunded":"{charge_id}"}}'


def report(n: int, worker: str, tools: list[str], notice: str, out: Any) -> None:
    """report prints what one run gave the model."""
    print(f"\nrun {n} on {worker}: tools given to the model: {', '.join(tools)}", file=out)
    if notice:
        print("  notice given to the model:\n" + "\n".join("    | " + line for line in notice.splitlines()), file=out)


async def story(one_run: Callable[[int, str, Vendor], Awaitable[None]], out: Any) -> None:
    """story runs the agent once while the vendor is up, then on each run
    of RUNS_DOWN, and prints how many requests the vendor saw."""
    vendor = Vendor()
    await one_run(1, "worker-1", vendor)
    print("\n*** the payment vendor goes down (HTTP 503) ***", file=out)
    vendor.down = True
    for n, worker in RUNS_DOWN:
        await one_run(n, worker, vendor)
    print(f"\nthe payment vendor saw {vendor.calls} requests", file=out)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def start_daemon(repo: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """start_daemon runs breakerd on a free port, an embedded Redis
    (BREAKERD_BIN names a built binary; otherwise `go run`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = Path(tempfile.mkdtemp()) / "policy.yaml"
    policy.write_text(POLICY)
    url = f"http://127.0.0.1:{port}"
    cmd = [os.environ["BREAKERD_BIN"]] if os.environ.get("BREAKERD_BIN") else ["go", "run", "./cmd/breakerd"]
    proc = subprocess.Popen([*cmd, "--listen", "127.0.0.1:0", "--http-listen", f"127.0.0.1:{port}", "--config", str(policy)],
                            cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not answers(url):
        if proc.poll() is not None:
            raise SystemExit("example: breakerd did not start")
        time.sleep(0.1)
    return url, proc


def main(doc: str, argv: list[str], demo: Callable[[str, str], None]) -> int:
    """main parses --url and --prefix, starts a daemon when none answers
    at --url, and calls demo(url, prefix)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:7071", help="breakerd's HTTP/JSON API")
    ap.add_argument("--prefix", default="demo-py:", help="the breaker names' prefix")
    args = ap.parse_args(argv)
    url, proc = args.url, None
    if answers(url):
        print(f"using breakerd at {url}")
    else:
        url, proc = start_daemon(Path(__file__).resolve().parents[2])
        print(f"no breakerd answers at {args.url}: started one at {url} (in-memory Redis)")
    try:
        demo(url, args.prefix)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
    sys.stdout.flush()
    return 0
