"""The daemon's Denial is what the model reads: the client renders it
through the shared templates, the same on the first denial and when a
run replays it from memory, and words nothing of its own."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import breakerd

from .conftest import Daemon
from .fakes import Fake, json_answer
from .test_daemon import client, wait_for
from .test_run import force


def test_forced_denial_replayed_from_run_memory(daemon: Daemon, name: Callable[[str], str]) -> None:
    """A forced breaker's second denial in a run, answered from the run's
    memory with no round trip, is the first one, operator's words and all."""
    b = name("payments")
    force(client(daemon, worker="ops"), b, "FORCE_MODE_OPEN")
    c = client(daemon, worker="w1")
    run = breakerd.Run(c, {"refund_charge": b})
    texts = []
    for _ in range(2):
        with pytest.raises(breakerd.CircuitOpen) as e:
            with run.guard("refund_charge"):
                raise AssertionError("a denied call does not run")
        texts.append(e.value.tool_result)
        sent = c.transport.calls
    assert c.transport.calls == sent
    first, again = (json.loads(t) for t in texts)
    assert first == again and first["status"] == "forced_open" and first.get("forced") is True
    assert first["reason"].startswith("forced open by an operator") and "maintenance window" in first["reason"]
    assert b not in texts[0]  # the tool's name, never the breaker's


def test_suspect_worker_status(daemon: Daemon, name: Callable[[str], str]) -> None:
    """A worker whose calls alone fail is denied as itself, not as the
    fleet's open circuit."""
    b = name("payments")
    w1 = client(daemon, worker="w1")
    watching = client(daemon, worker="w1", watch=[b])  # the same worker, following the stream
    assert watching.cache.wait_live(30)
    for _ in range(3):
        with pytest.raises(httpx.HTTPStatusError):
            with w1.guard(b, tool="refund_charge"):
                httpx.Response(503, request=httpx.Request("POST", "http://vendor/")).raise_for_status()
    run = breakerd.Run(w1, {"refund_charge": b})
    texts = []
    for _ in range(2):  # Allow's answer, then the run's memory
        with pytest.raises(breakerd.CircuitOpen) as e:
            with run.guard("refund_charge"):
                raise AssertionError("a denied call does not run")
        texts.append(e.value.tool_result)
    first, again = (json.loads(t) for t in texts)
    assert first.pop("may_return_in_ms") > 0 and again.pop("may_return_in_ms") > 0  # rendered when each is answered
    assert first == again and first["status"] == "worker_isolated" and first["scope"] == "worker" and first["reason"]
    assert e.value.denial is not None and e.value.denial.status == "worker_isolated"
    assert client(daemon, worker="w2").allow(b).allowed

    # The watch stream's state carries the suspect's own denial: this
    # worker's open cache answers it with no round trip, the same words.
    wait_for(lambda: watching.cache.denial(b) is not None, "the suspect's denial on the stream")
    sent = watching.transport.calls
    p = watching.allow(b, tool="refund_charge")
    assert not p.allowed and watching.transport.calls == sent
    cached = json.loads(p.tool_result)
    assert cached.pop("may_return_in_ms") > 0
    assert cached == first
    watching.close()


# -- a probe in flight, as a daemon sends it ---------------------------------------

LEASE_MS = 30_000
PROBE_REASON = "it failed and is being tested with a single call; its recovery is not confirmed yet"


class HalfOpen:
    """A daemon whose breaker is half-open with another worker's probe in
    flight: Allow denies with its Denial (a lease is no wait) while the
    state still holds the open state's reason."""

    def __init__(self) -> None:
        self.fake = Fake(self.handle)

    def state(self, body: Any) -> dict[str, Any]:
        return {"breaker": body.get("breaker") or body["breakers"][0], "state": "STATE_HALF_OPEN",
                "reason": "payments failing: 6 consecutive failures from 2 workers", "as_of_ms": "1000",
                "deny_until_ms": str(1000 + LEASE_MS), "alternatives": ["refund_later"],
                "denial": {"decision": "DECISION_DENIED_PROBE_IN_FLIGHT", "scope": "DENIAL_SCOPE_BREAKER",
                           "deny_until_ms": str(1000 + LEASE_MS), "reason": PROBE_REASON, "status": "probe_in_flight"}}

    def handle(self, method: str, body: Any) -> tuple[int, str, bytes]:
        st = self.state(body)
        if method == "Allow":
            return json_answer({"decision": "DECISION_DENIED_PROBE_IN_FLIGHT", "retry_after_ms": "0",
                                "reason": PROBE_REASON, "state": st, "denial": st["denial"]})
        if method == "BatchGet":
            return json_answer({"states": [st]})
        return json_answer({})


@pytest.fixture
def half_open() -> Iterator[HalfOpen]:
    d = HalfOpen()
    yield d
    d.fake.close()


def test_probe_in_flight_invites_no_retry(half_open: HalfOpen) -> None:
    """A probe in flight: the run drops the tool for good, and neither the
    denial, its replay nor the notice gives the lease as a wait or the
    previous state's reason."""
    c = breakerd.Client(half_open.fake.url, worker_id="w1", allow_budget=5, watch=False, clock=lambda: 1.0)
    run = breakerd.Run(c, {"refund_charge": "payments"})
    results = []
    for _ in range(2):
        with pytest.raises(breakerd.CircuitOpen) as e:
            with run.guard("refund_charge"):
                raise AssertionError("a denied call does not run")
        assert e.value.retry_after_ms == 0
        results.append(json.loads(e.value.tool_result))
    assert results[0] == results[1]
    assert results[0]["status"] == "probe_in_flight" and results[0]["reason"] == PROBE_REASON.rstrip(". ")
    assert not any(v for k, v in results[0].items() if k.endswith("_ms"))
    notice = run.notice()
    line = next(s for s in notice.splitlines() if s.startswith("- refund_charge: "))
    assert PROBE_REASON.rstrip(". ") in line and "30s" not in notice and "failing" not in notice
    assert "again" not in line.lower() and "not come back during this task" in line
    c.close()
