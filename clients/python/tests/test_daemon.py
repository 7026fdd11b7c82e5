"""The client against real daemons: a trip from two workers with raw
evidence, the daemon's tool result, refused input, failover between two
daemons, the open cache fed by the watch stream, and the fallback."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import httpx
import pytest

import breakerd
from breakerd._evidence import evidence_of

from .conftest import Daemon
from .fakes import Fake
from .proxy import Proxy
from .test_conformance import ROWS, kinds, python_failure  # noqa: F401 - kinds is a fixture


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Waits on a condition (never a wall-time margin: the bound is only
    for a broken build)."""
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def client(*daemons: Daemon, worker: str, **kw: Any) -> breakerd.Client:
    kw.setdefault("allow_budget", 5.0)
    kw.setdefault("watch", False)
    return breakerd.Client([d.url for d in daemons], worker_id=worker, **kw)


def fail(c: breakerd.Client, breaker: str, status: int = 503) -> dict[str, Any]:
    g = c.guard(breaker, tool="refund_charge")
    with pytest.raises(httpx.HTTPStatusError):
        with g:
            httpx.Response(status, request=httpx.Request("POST", "http://vendor/")).raise_for_status()
    assert g.result is not None
    return g.result


def trip(breaker: str, *clients: breakerd.Client, failures: int = 3) -> None:
    """Fails the breaker's calls from the clients in turn until it opens
    (the test policy: 3 failures from 2 workers)."""
    for i in range(failures):
        fail(clients[i % len(clients)], breaker)


def test_trip_from_two_workers(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("payments")
    w1, w2 = client(daemon, worker="w1"), client(daemon, worker="w2")
    first = fail(w1, b)
    assert first["counted"] is True and first["classified_as"] == "OUTCOME_SERVER_ERROR"
    fail(w1, b)
    assert w1.allow(b).allowed  # one worker alone: no quorum
    fail(w2, b)
    with pytest.raises(breakerd.CircuitOpen) as e:
        with w1.guard(b, tool="refund_charge"):
            raise AssertionError("a denied call must not run")
    d = e.value
    assert d.decision == "DECISION_DENIED_OPEN" and not d.degraded
    assert '"refund_charge"' in d.tool_result and "issue_refund_manually" in d.tool_result
    assert int(d.state["deny_until_ms"]) > int(d.state["as_of_ms"]) > 0


def test_rate_limit_evidence_is_classified(daemon: Daemon, name: Callable[[str], str]) -> None:
    c = client(daemon, worker="w1")
    p = c.allow(name("llm"))
    ans = c.record(p, evidence={"http_status": 429, "headers": {"retry-after": "120"}}, deadline_ms=1000)
    assert ans["classified_as"] == "OUTCOME_RATE_LIMITED"
    assert ans["why"]


def test_refused_name_is_an_error_not_an_outage(daemon: Daemon) -> None:
    c = client(daemon, worker="w1")
    for bad in ("", "x" * 300):
        with pytest.raises(breakerd.InvalidArgument) as e:
            c.allow(bad)
        assert e.value.message.startswith("breaker: ")  # the daemon's message starts with the field
    with pytest.raises(breakerd.InvalidArgument) as e:
        c.allow("b", tool="not a tool name!")
    assert e.value.message.startswith("tool: ")
    with pytest.raises(breakerd.InvalidArgument) as e:
        c.call("Allow", {"breaker": "b", "worker_id": "w1", "workerid": "typo"})
    assert e.value.fields == ("workerid",)  # the HTTP layer's field violations
    assert not c.degraded


def test_unknown_token_is_unauthenticated(daemons: Callable[..., Daemon], tmp_path: Any) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  - name: w\n    role: worker\n    workers: [w1]\n    token_sha256: " + "0" * 64 + "\n")
    tokens.chmod(0o600)
    d = daemons("--tokens", str(tokens))
    with pytest.raises(breakerd.Unauthenticated):
        client(d, worker="w1").allow("b")


def test_get_policy(daemon: Daemon, name: Callable[[str], str]) -> None:
    ans = client(daemon, worker="w1").get_policy(name("payments"))
    assert ans["policy"]["threshold"] == 3
    assert ans["policy"]["alternatives"] == ["issue_refund_manually"]


def test_the_fallback_follows_the_policy_that_came_with_the_first_allow(daemon: Daemon,
                                                                         name: Callable[[str], str]) -> None:
    """The breaker's policy rides on the client's first Allow of it (no
    GetPolicy at the daemon), and the fallback then opens at its threshold
    (3) where its own default is 5."""
    px = Proxy(urllib.parse.urlsplit(daemon.url).netloc)
    c = breakerd.Client(px.url, worker_id="w1", watch=False, allow_budget=5.0)
    b = name("fallback")
    try:
        for _ in range(2):
            assert not c.allow(b).degraded
        assert dict(px.methods) == {"Allow": 2}, "the policy came with the first Allow, and no GetPolicy was sent"
        px.close()  # no daemon answers from here on
        for _ in range(3):
            p = c.allow(b)
            assert p.allowed and p.degraded, "the fallback lets the call through"
            c.record(p, breakerd.HttpError(503, "vendor down"))
        p = c.allow(b)
        assert not p.allowed and p.degraded, "the fallback opened at the policy's threshold (3), not at its default (5)"
    finally:
        c.close()
        px.close()


def test_failover_keeps_answering(two_daemons: tuple[Daemon, Daemon], name: Callable[[str], str]) -> None:
    d1, d2 = two_daemons
    b = name("payments")
    c = client(d1, d2, worker="w1", allow_budget=2.0)
    trip(b, c, client(d2, worker="w2"))
    assert not c.allow(b).allowed
    d1.stop()
    p = c.allow(b)
    assert not p.allowed and not p.degraded  # d2 answered from the shared Redis
    assert c.transport.failovers == 1


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_proxys_gateway_page_is_that_daemon_away(daemon: Daemon, name: Callable[[str], str], status: int) -> None:
    """A 502/503/504 page from a proxy in front of a daemon: the next
    daemon answers; with no daemon beside it, the fallback does. A
    breakerd JSON error on the same statuses stays what it was."""
    page = (status, "text/html", b"<html><body><h1>Bad Gateway</h1>nginx</body></html>")
    gateway = Fake(lambda m, b: page)
    try:
        c = breakerd.Client([gateway.url, daemon.url], worker_id="w1", watch=False, allow_budget=5.0)
        p = c.allow(name("x"))
        assert p.allowed and not p.degraded, "the daemon beside the proxy answers"
        assert c.transport.failovers == 1 and len(gateway.requests) == 1
        c.close()
        alone = breakerd.Client([gateway.url], worker_id="w1", watch=False, allow_budget=5.0)
        p = alone.allow(name("x"))
        assert p.allowed and p.degraded, "no daemon answers: the fallback does"
        alone.close()
    finally:
        gateway.close()


def test_outage_falls_back(daemon: Daemon, name: Callable[[str], str]) -> None:
    b, other = name("payments"), name("search")
    c = client(daemon, worker="w1", allow_budget=2.0)
    trip(b, c, client(daemon, worker="w2"))
    c.allow(other)  # reads its policy (threshold 3) for the fallback
    assert not c.allow(b).allowed
    daemon.stop()
    # What the client knew stays denied, marked degraded.
    p = c.allow(b)
    assert not p.allowed and p.degraded
    assert '"degraded":true' in p.tool_result.replace(" ", "")
    # Others are judged by the local breaker, at the policy's threshold.
    for _ in range(3):
        with pytest.raises(TimeoutError):
            with c.guard(other):
                raise TimeoutError
    p = c.allow(other)
    assert not p.allowed and p.degraded
    assert c.degraded


def test_open_cache_answers_without_a_round_trip(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("payments")
    c = client(daemon, worker="w1", watch=True)
    assert c.cache is not None and c.cache.wait_live(30)
    trip(b, client(daemon, worker="w2"), client(daemon, worker="w3"))
    wait_for(lambda: c.cache is not None and c.cache.denial(b) is not None, "the open breaker on the stream")
    sent = c.transport.calls
    p = c.allow(b, tool="refund_charge")
    assert not p.allowed and c.transport.calls == sent
    assert '"refund_charge"' in p.tool_result


@pytest.mark.parametrize("named", [False, True], ids=["every breaker: a fresh snapshot", "named breakers: a replay"])
def test_watch_snapshot_and_resume(two_daemons: tuple[Daemon, Daemon], name: Callable[[str], str], named: bool) -> None:
    d1, d2 = two_daemons
    b1, b2 = name("payments"), name("search")
    c = client(d1, d2, worker="w1", watch=[b1, b2] if named else True)
    assert c.cache is not None and c.cache.wait_live(30)
    trip(b1, client(d1, worker="w2"), client(d1, worker="w3"))
    assert c.cache is not None
    wait_for(lambda: c.cache is not None and c.cache.denial(b1) is not None, "the trip's event")
    d1.stop()  # the stream moves to d2
    trip(b2, client(d2, worker="w2"), client(d2, worker="w3"))
    wait_for(lambda: c.cache is not None and c.cache.denial(b2) is not None, "the event missed while switching")
    assert c.cache.denial(b1) is not None
    assert c.cache.resumes >= 1  # it reconnected with Last-Event-ID


def test_every_row_classifies_as_written(daemon: Daemon, name: Callable[[str], str], kinds: dict[str, BaseException]) -> None:
    """conformance/classification.json: each row's Python failure, recorded through the client, is what
    the daemon classifies as the row's outcome."""
    c = breakerd.Client(daemon.url, worker_id="conformance", allow_budget=5, watch=False)
    b = name("classify")
    wrong = []
    for param in ROWS:
        row = param.values[0]
        ev = evidence_of(python_failure(row["evidence"], kinds))
        if row["evidence"].get("no_deadline"):
            ev["no_deadline"] = True
        p = c.allow(b)
        ans = c.record(p, evidence=ev, deadline_ms=row.get("deadline_ms", 0))
        if ans.get("classified_as") != row["want"]["outcome"]:
            wrong.append((row["name"], ev, ans.get("classified_as"), row["want"]["outcome"]))
        if not c.allow(b).allowed:
            b = name(f"classify-{len(wrong)}-{row['name'][:8]}")  # a new breaker when this one tripped
    assert wrong == []


def test_http_error_reaches_the_daemon_as_its_status(daemon: Daemon, name: Callable[[str], str]) -> None:
    """A tool that raises HttpError (or raise_for_status's) is recorded
    by its status, a 503 as a server error, never as an unknown error."""
    c = client(daemon, worker="w1")
    g = c.guard(name("payments"))
    with pytest.raises(breakerd.HttpError):
        with g:
            raise breakerd.HttpError(503, "payments down")
    assert g.result is not None and g.result["classified_as"] == "OUTCOME_SERVER_ERROR" and g.result["counted"]
    g = c.guard(name("payments"))
    with pytest.raises(breakerd.HttpError):
        with g:
            breakerd.raise_for_status(httpx.Response(408, request=httpx.Request("GET", "http://vendor/")))
    assert g.result is not None and g.result["classified_as"] == "OUTCOME_TIMEOUT"


def test_excluded_errors_never_trip(daemon: Daemon, name: Callable[[str], str]) -> None:
    """Six excluded errors from two workers: recorded, never counted, the
    breaker stays closed."""
    b = name("quotes")
    for i in range(6):
        g = client(daemon, worker=f"w{i % 2}").guard(b, exclude=(KeyError, ValueError))
        with pytest.raises(KeyError):
            with g:
                raise KeyError("ZZZ")
        assert g.result is not None and g.result["classified_as"] == breakerd.EXCLUDED_OUTCOME
        assert g.result["counted"] is False
    assert client(daemon, worker="w3").allow(b).allowed


def test_a_tools_own_bug_is_not_an_outage(daemon: Daemon, name: Callable[[str], str]) -> None:
    """ValueError and KeyError from tool code are unrecognised errors: six
    from two workers leave the breaker closed."""
    b = name("quotes")
    for i in range(6):
        g = client(daemon, worker=f"w{i % 2}").guard(b, tool="get_quote")
        with pytest.raises((KeyError, ValueError)):
            with g:
                raise (KeyError if i % 2 else ValueError)("unknown symbol ZZZ")
        assert g.result is not None and g.result["classified_as"] == "OUTCOME_UNRECOGNISED"
        assert g.result["counted"] is False
    assert client(daemon, worker="w3").allow(b).allowed
