"""What the client saved, reported to a real daemon and read back from its
Savings (the wire as the witness): denials the open cache answered, tools
runs left out (one per run and tool), a report kept while no daemon
answers and sent once one does, the periodic report, and no report when
nothing was saved. The batching bounds are checked on a recorded send."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import breakerd
from breakerd._savings import MAX_BATCH, MAX_COUNT, MAX_HELD, Savings
from breakerd._transport import Outage

from .conftest import REPO, Daemon
from .test_daemon import client, wait_for
from .test_run import TOOLS, force


def saved(c: breakerd.Client, breaker: str) -> dict[str, int]:
    """The daemon's Savings row for breaker (zeros when it has none)."""
    rows = c.call("Savings", {"breakers": [breaker]}).get("breakers", [])
    row = next((r for r in rows if r.get("breaker") == breaker), {})
    return {k: int(row.get(k, 0)) for k in ("daemon_denials", "client_denials", "tools_removed")}


def watching(daemon: Daemon, breaker: str, **kw: Any) -> breakerd.Client:
    """A client whose live open cache knows breaker denies."""
    c = client(daemon, worker="w1", watch=True, **kw)
    assert c.cache.wait_live(30)
    wait_for(lambda: c.cache.denial(breaker) is not None, "the forced breaker in the open cache")
    return c


def test_cached_denials_are_reported(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("payments")
    op = client(daemon, worker="ops")
    force(op, b, "FORCE_MODE_OPEN")
    c = watching(daemon, b, savings_interval=3600)
    sent = c.transport.calls
    for _ in range(3):
        assert not c.allow(b).allowed
    assert c.transport.calls == sent  # answered in this process
    assert c.savings.pending() == {b: (3, 0)}
    assert c.flush_savings()
    assert c.transport.calls == sent + 1  # one ReportSavings
    assert saved(op, b)["client_denials"] == 3 and saved(op, b)["tools_removed"] == 0
    assert c.saved_denials_reported == 3
    c.close()
    assert saved(op, b)["client_denials"] == 3  # nothing left: close sent nothing more


def test_tools_left_out_are_reported_once_per_run_and_tool(daemon: Daemon, name: Callable[[str], str]) -> None:
    breakers = {"web_search": name("search"), "refund_charge": name("payments"), "refund_status": name("payments")}
    op = client(daemon, worker="ops")
    force(op, breakers["refund_charge"], "FORCE_MODE_OPEN")
    c = client(daemon, worker="w1", savings_interval=3600)
    run = breakerd.Run(c, breakers)
    assert [t["name"] for t in run.available(TOOLS)] == ["web_search"]
    assert [t["name"] for t in run.available(TOOLS)] == ["web_search"]  # the same run: not counted again
    with pytest.raises(breakerd.CircuitOpen):
        with run.guard("refund_charge"):
            raise AssertionError("a tool the run lost is never called")
    assert breakerd.Run(c, breakers).available(TOOLS[:2]) == TOOLS[:1]  # another run, one of the tools
    c.close()  # close sends what is left
    assert saved(op, breakers["refund_charge"]) == {"daemon_denials": 0, "client_denials": 0, "tools_removed": 3}
    assert saved(op, breakers["web_search"])["tools_removed"] == 0
    assert c.tools_removed_reported == 3


def test_a_report_no_daemon_took_is_sent_later(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("payments")
    op = client(daemon, worker="ops")
    force(op, b, "FORCE_MODE_OPEN")
    c = watching(daemon, b, savings_interval=3600)
    assert not c.allow(b).allowed
    daemon.stop()
    assert not c.flush_savings()  # no daemon: kept
    assert c.savings.pending() == {b: (1, 0)}
    daemon.restart()
    force(op, b, "FORCE_MODE_OPEN")  # an embedded Redis starts empty; the shared one keeps it
    wait_for(lambda: c.cache.denial(b) is not None, "the stream back on the restarted daemon")
    assert not c.allow(b).allowed
    assert c.flush_savings()
    assert c.savings.pending() == {}
    assert saved(op, b)["client_denials"] == 2
    c.close()


def test_reports_go_out_periodically(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("payments")
    op = client(daemon, worker="ops")
    force(op, b, "FORCE_MODE_OPEN")
    c = watching(daemon, b, savings_interval=0.05)
    assert not c.allow(b).allowed
    wait_for(lambda: saved(op, b)["client_denials"] == 1, "the periodic report")
    c.close()


def test_nothing_saved_nothing_sent(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("payments")
    op = client(daemon, worker="ops")
    force(op, b, "FORCE_MODE_OPEN")
    c = client(daemon, worker="w1", savings_interval=3600)  # no open cache: breakerd answers every call
    assert not c.allow(b).allowed
    assert breakerd.Run(c, {"web_search": name("search")}).available(TOOLS[:1]) == TOOLS[:1]
    sent = c.transport.calls
    assert c.flush_savings()
    c.close()
    assert c.transport.calls == sent  # no ReportSavings on the wire
    wait_for(lambda: saved(op, b)["daemon_denials"] >= 1, "the daemon's own denial")
    assert saved(op, b)["client_denials"] == 0


def test_savings_off_counts_nothing(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("payments")
    force(client(daemon, worker="ops"), b, "FORCE_MODE_OPEN")
    c = watching(daemon, b, savings_interval=0)
    assert not c.allow(b).allowed
    assert c.savings.pending() == {}
    c.close()


class Recorder:
    """A send that records each batch, or fails as told."""

    def __init__(self) -> None:
        self.batches: list[list[dict[str, Any]]] = []
        self.fail: BaseException | None = None

    def __call__(self, batch: list[dict[str, Any]]) -> None:
        if self.fail is not None:
            raise self.fail
        self.batches.append(batch)


def test_batches_are_bounded() -> None:
    rec = Recorder()
    s = Savings(rec, interval=0)
    s.enabled = True  # counting on, no thread: this test flushes
    for i in range(MAX_BATCH + 1):
        s.add(f"b{i}", denials=1)
    s.add("b0", denials=MAX_COUNT)  # b0 holds MAX_COUNT + 1
    assert s.flush()
    assert [len(b) for b in rec.batches] == [MAX_BATCH, 2]
    counts: dict[str, int] = {}
    for batch in rec.batches:
        assert len({r["breaker"] for r in batch}) == len(batch)  # one report per breaker
        for r in batch:
            assert 0 < int(r["local_denials"]) <= MAX_COUNT
            counts[r["breaker"]] = counts.get(r["breaker"], 0) + int(r["local_denials"])
    assert counts["b0"] == MAX_COUNT + 1 and sum(counts.values()) == MAX_COUNT + MAX_BATCH + 1


def test_held_counts_are_bounded_and_refusals_dropped() -> None:
    rec = Recorder()
    s = Savings(rec, interval=0)
    s.enabled = True
    rec.fail = Outage("no daemon")
    for i in range(MAX_HELD + 5):
        s.add(f"b{i}", removed=1)
    s.add("b0", removed=1)
    assert not s.flush()
    assert len(s.pending()) == MAX_HELD and s.pending()["b0"] == (0, 2)  # kept, no more breakers than the bound
    rec.fail = breakerd.PermissionDenied("PERMISSION_DENIED", "not yours", status=403, url="")
    with pytest.raises(breakerd.PermissionDenied):
        s.flush()
    assert s.pending() == {}  # a refusal is not retried


CASES = json.loads((REPO / "conformance" / "savings.json").read_text())["cases"]


def test_conformance_savings_has_cases() -> None:
    assert CASES, "conformance/savings.json holds no case"


@pytest.mark.parametrize("case", [pytest.param(c, id=c["name"]) for c in CASES])
def test_conformance_savings(daemon: Daemon, name: Callable[[str], str], case: dict[str, Any]) -> None:
    """conformance/savings.json: the client reports what every client reports."""
    op = client(daemon, worker="ops")
    for b in case["forced_open"]:
        force(op, name(b), "FORCE_MODE_OPEN")
    c = client(daemon, worker="agent", watch=bool(case["open_cache"]), savings_interval=3600)
    if case["open_cache"]:
        assert c.cache.wait_live(30)
        wait_for(lambda: all(c.cache.denial(name(b)) is not None for b in case["forced_open"]), "every forced breaker in the open cache")
    tools = {t["name"]: name(t["breaker"]) for s in case["steps"] for t in s.get("tools", [s.get("tool")]) if t}
    run: breakerd.Run | None = None
    for i, step in enumerate(case["steps"]):
        at = f"step {i} ({step['op']})"
        if step["op"] == "allow":
            assert c.allow(name(step["breaker"])).allowed == step["want_allowed"], at
        elif step["op"] in ("run", "available"):
            if step["op"] == "run" or run is None:
                run = breakerd.Run(c, tools)
            assert [t["name"] for t in run.available(step["tools"])] == step["want_available"], at
        elif step["op"] == "call":
            assert run is not None, at
            ran = False
            try:
                with run.guard(step["tool"]["name"]):
                    ran = True
            except breakerd.CircuitOpen:
                pass
            assert ran == step["want_allowed"], at
        else:
            raise AssertionError(f"{at}: unknown op")
    assert c.flush_savings()
    for w in case["want"]:
        got = saved(op, name(w["breaker"]))
        assert (got["client_denials"], got["tools_removed"]) == (w["local_denials"], w["tools_removed"]), w["breaker"]
    c.close()
