"""A small agent on the OpenAI Agents SDK with breakerd's adapter: a
scripted model (the SDK's own ScriptedModel: no API key, no network) and
two tools, web_search (healthy) and refund_charge (whose payment vendor
goes down), run by two workers of one fleet against breakerd. It prints
the tool list each run gives the model: the vendor's outage trips the
fleet's breaker, refund_charge leaves the next run's tools, and the model
is given the notice. The Python twin of examples/agent.

    go run ./cmd/breakerd --http-listen 127.0.0.1:7071 &
    pip install ./clients/python openai-agents
    python examples/python/agent.py --url http://127.0.0.1:7071

Without a daemon at --url it starts one (`go run ./cmd/breakerd`, an
embedded Redis) with a policy that offers issue_refund_manually instead
of payments.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import agents
import httpx
from agents.testing import ScriptedModel, assistant_message, function_call

import breakerd
from breakerd.adapters.openai_agents import Toolbox

# The policy of a daemon the example starts: the alternative the model is
# offered while payments is out.
POLICY = """breakers:
  - match: "*payments"
    alternatives: [issue_refund_manually]
"""


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


def toolbox(url: str, prefix: str, worker: str, vendor: Vendor) -> tuple[Toolbox, list[Any]]:
    """One worker's tools; the breakers are named for the dependencies."""
    box = Toolbox(breakerd.Client(url, worker_id=worker, allow_budget=2.0, watch=False),
                  {"refund_charge": prefix + "payments", "web_search": prefix + "search"})

    @box.function_tool
    def web_search(query: str) -> str:
        """Search the web."""
        return '{"ok":true}'

    @box.function_tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return vendor.refund(charge_id)

    return box, [web_search, refund_charge]


def script(n: int, tools: list[str]) -> ScriptedModel:
    """The model: refund if it can, then answer."""
    if "refund_charge" not in tools:
        return ScriptedModel([[assistant_message("I could not refund ch_42: payments is out of service; "
                                                 "use issue_refund_manually instead.")]])
    return ScriptedModel([[function_call("refund_charge", {"charge_id": "ch_42"}, call_id=f"run{n}")],
                          [assistant_message("Here is what the refund tool answered.")]])


async def one_run(n: int, url: str, prefix: str, worker: str, vendor: Vendor, out: Any) -> None:
    box, tools = toolbox(url, prefix, worker, vendor)
    run = box.new_run()
    allowed = await asyncio.to_thread(run.available, tools)
    names = [t.name for t in allowed]
    print(f"\nrun {n} on {worker}: tools given to the model: {', '.join(names)}", file=out)
    if run.notice():
        print("  notice given to the model:\n" + "\n".join("    | " + line for line in run.notice().splitlines()), file=out)
    model = script(n, names)
    agent = agents.Agent(name="support", instructions="Help the customer.", tools=tools, model=model)
    result = await box.run(agent, "Refund charge ch_42", run=run)
    for item in result.new_items:
        if isinstance(item, agents.ToolCallOutputItem):
            print(f"  model calls refund_charge -> {item.output}", file=out)
    print(f"  final answer: {result.final_output}", file=out)


async def demo(url: str, prefix: str, out: Any) -> None:
    agents.set_tracing_disabled(True)
    vendor = Vendor()
    await one_run(1, url, prefix, "worker-1", vendor, out)
    print("\n*** the payment vendor goes down (HTTP 503) ***", file=out)
    vendor.down = True
    for n, worker in ((2, "worker-2"), (3, "worker-1"), (4, "worker-2"), (5, "worker-1"), (6, "worker-2"), (7, "worker-1")):
        await one_run(n, url, prefix, worker, vendor, out)
    print(f"\nthe payment vendor saw {vendor.calls} requests", file=out)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def start_daemon(repo: Path) -> tuple[str, subprocess.Popen[bytes]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = Path(tempfile.mkdtemp()) / "policy.yaml"
    policy.write_text(POLICY)
    url = f"http://127.0.0.1:{port}"
    cmd = [os.environ.get("BREAKERD_BIN", "")] if os.environ.get("BREAKERD_BIN") else ["go", "run", "./cmd/breakerd"]
    proc = subprocess.Popen([*cmd, "--listen", "127.0.0.1:0", "--http-listen", f"127.0.0.1:{port}", "--config", str(policy)],
                            cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not answers(url):
        if proc.poll() is not None:
            raise SystemExit("agent: breakerd did not start")
        time.sleep(0.1)
    return url, proc


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
        asyncio.run(demo(url, args.prefix, sys.stdout))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
