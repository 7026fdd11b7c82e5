"""Run against a real daemon: the toolset filtered by deny_until_ms, a
removal that lasts the run, the notice, a denial met mid-run, and the
fallback's verdicts marked degraded."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import breakerd
from breakerd import _render

from .conftest import Daemon
from .test_daemon import client, trip

TOOLS = [
    {"name": "web_search", "input_schema": {"type": "object"}},
    {"name": "refund_charge", "input_schema": {"type": "object"}},
    {"name": "refund_status", "input_schema": {"type": "object"}},
]


def force(c: breakerd.Client, breaker: str, mode: str) -> dict[str, Any]:
    return c.call("Force", {"breaker": breaker, "mode": mode, "reason": "maintenance window", "operator": "ops"})


@pytest.fixture
def breakers(name: Callable[[str], str]) -> dict[str, str]:
    return {"web_search": name("search"), "refund_charge": name("payments"), "refund_status": name("payments")}


def test_available_and_notice(daemon: Daemon, breakers: dict[str, str]) -> None:
    now = time.time()
    w1, w2 = client(daemon, worker="w1", clock=lambda: now), client(daemon, worker="w2")
    run = breakerd.Run(w1, breakers)
    assert run.available(TOOLS) == TOOLS and run.notice() == "" and run.degraded == ()
    trip(breakers["refund_charge"], w1, w2)
    sent = w1.transport.calls
    kept = run.available(TOOLS)
    assert w1.transport.calls == sent + 1  # one BatchGet for the toolset
    assert [t["name"] for t in kept] == ["web_search"]
    lost = run.degraded
    assert [u.tool for u in lost] == ["refund_charge", "refund_status"]
    assert all(u.decision == "DECISION_DENIED_OPEN" and not u.degraded for u in lost)
    assert lost[0].alternatives == ("issue_refund_manually",)
    notice = run.notice()
    (st,) = w2.batch_get([breakers["refund_charge"]])  # the daemon's denial, as another worker reads it
    d = st["denial"]
    assert all(u.reason == d["reason"] and u.denial.status == d["status"] == "circuit_open" for u in lost)
    denials = [{"tool": u.tool, "status": d["status"], "reason": d["reason"], "forced": False, "degraded": False,
                "scope": "breaker", "alternatives": list(u.alternatives), "may_return_at_ms": int(d["may_return_at_ms"])}
               for u in lost]
    assert notice == _render.notice_of(denials, w1.cache.now_redis_ms())  # the run's clock, injected, on Redis time
    assert "- refund_charge: " in notice and "Instead you can use: issue_refund_manually." in notice
    assert breakers["refund_charge"] not in notice and "w2" not in notice


def test_removal_lasts_the_run(daemon: Daemon, breakers: dict[str, str]) -> None:
    op = client(daemon, worker="ops")
    w1 = client(daemon, worker="w1")
    run = breakerd.Run(w1, breakers)
    force(op, breakers["refund_charge"], "FORCE_MODE_OPEN")
    assert [t["name"] for t in run.available(TOOLS)] == ["web_search"]
    assert run.degraded[0].decision == "DECISION_DENIED_FORCED_OPEN"
    assert "- refund_charge: forced open by an operator: maintenance window." in run.notice()
    force(op, breakers["refund_charge"], "FORCE_MODE_AUTO")
    assert [t["name"] for t in run.available(TOOLS)] == ["web_search"]  # still gone in this run
    with pytest.raises(breakerd.CircuitOpen) as e:
        with run.guard("refund_charge"):
            raise AssertionError("a tool the run lost is never called")
    assert '"forced":true' in e.value.tool_result
    assert breakerd.Run(w1, breakers).available(TOOLS) == TOOLS  # a new run has it back


def test_denial_mid_run_removes_the_breakers_tools(daemon: Daemon, breakers: dict[str, str]) -> None:
    w1, w2 = client(daemon, worker="w1"), client(daemon, worker="w2")
    run = breakerd.Run(w1, breakers)
    assert run.available(TOOLS) == TOOLS
    trip(breakers["refund_charge"], w1, w2)
    sent = w1.transport.calls
    with pytest.raises(breakerd.CircuitOpen) as e:
        with run.guard("refund_charge"):
            raise AssertionError("denied calls do not run")
    assert e.value.tool == "refund_charge" and not e.value.degraded
    assert [u.tool for u in run.degraded] == ["refund_charge", "refund_status"]
    with pytest.raises(breakerd.CircuitOpen):
        with run.guard("refund_status"):
            raise AssertionError("denied calls do not run")
    assert w1.transport.calls == sent + 1  # the second denial cost no round trip


def test_outage_verdicts_are_degraded(daemon: Daemon, breakers: dict[str, str]) -> None:
    w1, w2 = client(daemon, worker="w1", allow_budget=2.0), client(daemon, worker="w2")
    trip(breakers["refund_charge"], w1, w2)
    assert not w1.allow(breakers["refund_charge"]).allowed  # the client learns the denial
    daemon.stop()
    run = breakerd.Run(w1, breakers)
    assert [t["name"] for t in run.available(TOOLS)] == ["web_search"]
    assert all(u.degraded for u in run.degraded)
    assert "(Judged by this worker alone: the breaker service is unreachable.)" in run.notice()
