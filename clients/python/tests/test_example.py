"""examples/python's agents, one per framework, run against a real daemon
and print the tools and notice each run gives the model: refund_charge
leaves after the trip."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable

import pytest

from .conftest import REPO, Daemon


@pytest.mark.parametrize("example", ["agent.py", "langchain_agent.py"])
def test_example_agent(daemon: Daemon, name: Callable[[str], str], example: str) -> None:
    out = subprocess.run([sys.executable, str(REPO / "examples" / "python" / example), "--url", daemon.url,
                          "--prefix", name("")], check=True, capture_output=True, text=True, timeout=300).stdout
    tools = re.findall(r"^run (\d) on worker-\d: tools given to the model: (.*)$", out, re.M)
    assert tools[0] == ("1", "web_search, refund_charge")
    assert tools[-1] == ("7", "web_search")
    assert "- refund_charge: " in out.split("run 7 on")[1]  # the notice
    # The test policy trips at 3 failures: runs 2-4 reach the vendor, then none.
    assert "the payment vendor saw 4 requests" in out
    # Before the trip, a failure reaches the model as breakerd's failure text.
    assert "refund_charge failed (the failure is recorded)" in out.split("run 2 on")[1]
