"""guard as a decorator and a context manager, sync and async: what it
sends (the fake daemon's requests are the witness) and what it raises."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import breakerd
from breakerd._fallback import LocalPolicy

from .fakes import Fake, json_answer

TOOL_RESULT = '{"status":"circuit_open","tool":"refund_charge","breaker":"payments"}'


class Daemon:
    """Answers Allow with self.decision; Records are kept."""

    def __init__(self) -> None:
        self.decision = "DECISION_ALLOWED"
        self.fake = Fake(self.handle)

    def handle(self, method: str, body: Any) -> tuple[int, str, bytes]:
        if method == "Allow":
            ans: dict[str, Any] = {"decision": self.decision, "ticket": {"generation": "7", "lease_token": "t"}}
            if self.decision.startswith("DECISION_DENIED"):
                ans.update(reason="payments failing", retry_after_ms="30000", tool_result=TOOL_RESULT,
                           state={"breaker": body["breaker"], "alternatives": ["refund_later"]})
            return json_answer(ans)
        if method == "Record":
            return json_answer({"counted": True, "classified_as": "OUTCOME_SERVER_ERROR"})
        return json_answer({})

    def records(self) -> list[Any]:
        return [b for m, b in self.fake.requests if m == "Record"]


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    d = Daemon()
    yield d
    d.fake.close()


@pytest.fixture
def client(daemon: Daemon) -> breakerd.Client:
    return breakerd.Client(daemon.fake.url, worker_id="w1", allow_budget=5, watch=False)


def failing(status: int) -> None:
    httpx.Response(status, request=httpx.Request("GET", "http://vendor/")).raise_for_status()


def test_decorator_records_and_reraises(daemon: Daemon, client: breakerd.Client) -> None:
    @client.guard("payments", tool="refund_charge")
    def refund(charge: str) -> str:
        if charge == "bad":
            failing(503)
        return "ok:" + charge

    assert refund("c1") == "ok:c1"
    with pytest.raises(httpx.HTTPStatusError):
        refund("bad")
    ok, bad = daemon.records()
    assert ok["evidence"] == {} and ok["ticket"] == {"generation": "7", "lease_token": "t"}
    assert bad["evidence"] == {"http_status": 503, "no_deadline": True}
    assert bad["breaker"] == "payments" and bad["worker_id"] == "w1"
    allow = next(b for m, b in daemon.fake.requests if m == "Allow")
    assert allow == {"breaker": "payments", "worker_id": "w1", "tool": "refund_charge", "with_policy": True}


def test_deadline_is_sent(daemon: Daemon, client: breakerd.Client) -> None:
    with pytest.raises(httpx.HTTPStatusError):
        with client.guard("payments", deadline=10.0):
            failing(429)
    (rec,) = daemon.records()
    assert 0 < int(rec["deadline_ms"]) <= 10_000
    assert "no_deadline" not in rec["evidence"]


def test_denial_raises_without_calling(daemon: Daemon, client: breakerd.Client) -> None:
    daemon.decision = "DECISION_DENIED_OPEN"
    calls = 0

    @client.guard("payments", tool="refund_charge")
    def refund() -> None:
        nonlocal calls
        calls += 1

    with pytest.raises(breakerd.CircuitOpen) as e:
        refund()
    assert calls == 0 and daemon.records() == []
    assert e.value.tool_result == TOOL_RESULT
    assert e.value.retry_after_ms == 30000 and e.value.alternatives == ("refund_later",)


def test_keyboard_interrupt_is_a_cancel(daemon: Daemon, client: breakerd.Client) -> None:
    with pytest.raises(KeyboardInterrupt):
        with client.guard("payments"):
            raise KeyboardInterrupt
    assert daemon.records()[0]["evidence"] == {"error_kind": "ERROR_KIND_CANCELLED"}


def test_one_block_at_a_time(client: breakerd.Client) -> None:
    g = client.guard("payments")
    with g:
        with pytest.raises(RuntimeError, match="one block at a time"):
            g.__enter__()


async def test_async_decorator_and_block(daemon: Daemon, client: breakerd.Client) -> None:
    @client.guard("payments")
    async def lookup() -> int:
        await asyncio.sleep(0)
        failing(502)
        return 1

    with pytest.raises(httpx.HTTPStatusError):
        await lookup()
    async with client.guard("payments") as permit:
        assert permit.allowed
    assert [r["evidence"] for r in daemon.records()] == [{"http_status": 502, "no_deadline": True}, {}]


async def test_async_cancel_is_recorded(daemon: Daemon, client: breakerd.Client) -> None:
    started = asyncio.Event()

    @client.guard("payments")
    async def slow() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(slow())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(3000):  # sent once the cancel is known not to be a deadline's
        if daemon.records():
            break
        await asyncio.sleep(0.01)
    assert daemon.records()[0]["evidence"] == {"error_kind": "ERROR_KIND_CANCELLED"}


async def test_async_client_same_names(daemon: Daemon) -> None:
    async with breakerd.AsyncClient(daemon.fake.url, worker_id="w1", allow_budget=5, watch=False) as c:
        p = await c.allow("payments")
        assert p.allowed
        ans = await c.record(p, None)
        assert ans["counted"] is True
        for name in ("allow", "record", "get", "batch_get", "get_policy", "guard", "close"):
            assert hasattr(breakerd.Client, name) and hasattr(breakerd.AsyncClient, name)


def test_async_client_has_every_public_member_of_client() -> None:
    def public(cls: type) -> set[str]:
        return {n for n in dir(cls) if not n.startswith("_")}

    assert public(breakerd.Client) <= public(breakerd.AsyncClient)


async def test_async_client_fast_and_aio_are_the_clients(daemon: Daemon) -> None:
    async with breakerd.AsyncClient(daemon.fake.url, worker_id="w1", watch=False) as c:
        assert c.fast is None and c.aio is c
    c = breakerd.AsyncClient("http://127.0.0.1:1", worker_id="w1", fast=True)
    assert c.fast is not None and c.fast is c.sync.fast
    await c.close()


@pytest.mark.parametrize(("breaker", "kw", "field"), [
    ("", {}, "breaker"), (123, {}, "breaker"), (" payments", {}, "breaker"),
    ("payments", {"tool": "refund charge"}, "tool"), ("payments", {"tool": 7}, "tool"),
    ("payments", {"deadline": "5"}, "deadline"), ("payments", {"deadline": float("nan")}, "deadline"),
])
def test_a_bad_guard_fails_when_it_is_made(daemon: Daemon, client: breakerd.Client, breaker: Any, kw: dict[str, Any],
                                           field: str) -> None:
    """A decorator fails at import, naming the field, not at its first
    call; and so do a block's guard and a run's."""
    with pytest.raises(breakerd.InvalidArgument) as e:
        @client.guard(breaker, **kw)
        def refund() -> None:
            pass
    assert e.value.fields == (field,) and e.value.status == 0
    with pytest.raises(breakerd.InvalidArgument):
        client.aio.guard(breaker, **kw)
    tool = kw.get("tool", "refund")
    with pytest.raises(breakerd.InvalidArgument) as e:
        breakerd.Run(client, {tool: breaker}).guard(tool, deadline=kw.get("deadline"))
    assert e.value.fields == (field,)
    assert daemon.fake.requests == []


def test_a_spent_deadline_is_sent_as_none_left(daemon: Daemon, client: breakerd.Client) -> None:
    with client.guard("payments", deadline=-1.0):
        pass
    assert daemon.records()[0]["deadline_ms"] == "0"


def test_excluded_errors_are_never_counted(daemon: Daemon, client: breakerd.Client) -> None:
    """exclude, as pybreaker's: exception types or predicates. An excluded
    error is sent as the never-counted outcome, with no evidence, and
    re-raised; any other error keeps its evidence."""

    class QuoteNotFound(LookupError):
        pass

    g = client.guard("quotes", exclude=[QuoteNotFound, lambda e: isinstance(e, httpx.HTTPStatusError)
                                        and e.response.status_code == 409])
    with pytest.raises(QuoteNotFound):
        with g._fresh():
            raise QuoteNotFound("ZZZ")
    with pytest.raises(httpx.HTTPStatusError):
        with g._fresh():
            failing(409)
    with pytest.raises(httpx.HTTPStatusError):
        with g._fresh():
            failing(503)

    @client.guard("quotes", exclude=KeyError)
    async def lookup() -> None:
        raise KeyError("ZZZ")

    with pytest.raises(KeyError):
        asyncio.run(lookup())
    sent = [(r.get("outcome"), r.get("evidence")) for r in daemon.records()]
    assert sent == [(breakerd.EXCLUDED_OUTCOME, None), (breakerd.EXCLUDED_OUTCOME, None),
                    (None, {"http_status": 503, "no_deadline": True}), (breakerd.EXCLUDED_OUTCOME, None)]
    assert breakerd.EXCLUDED_OUTCOME == "OUTCOME_INVALID_ARGUMENT"


def test_excluded_error_is_ignored_by_the_fallback() -> None:
    """No daemon answers: an excluded error neither counts toward the
    local trip nor ends a failure run."""
    c = breakerd.Client("http://127.0.0.1:1", worker_id="w1", allow_budget=0.2, watch=False)
    try:
        for i in range(LocalPolicy().threshold - 1):  # one failure short, with excluded errors between
            with pytest.raises(httpx.HTTPStatusError):
                with c.guard("quotes"):
                    failing(503)
            with pytest.raises(ValueError):
                with c.guard("quotes", exclude=ValueError):
                    raise ValueError(f"bad symbol {i}")
        assert c.allow("quotes").allowed
        with pytest.raises(httpx.HTTPStatusError):
            with c.guard("quotes"):
                failing(503)
        assert not c.allow("quotes").allowed
    finally:
        c.close()
