"""A guarded call ended by the caller's deadline is a timeout, counted by
a real daemon; a call cancelled for another reason is a cancel, never
counted. The daemon's breaker state (its failure count) is the witness."""

from __future__ import annotations

import asyncio
import sys
import urllib.parse
from collections.abc import Callable

import pytest

import breakerd

from .conftest import Daemon
from .proxy import Proxy
from .test_daemon import client


async def until(cond: Callable[[], bool], what: str) -> None:
    """Waits on a condition without holding the loop (the bound is only
    for a broken build)."""
    for _ in range(3000):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def hang() -> None:
    await asyncio.Event().wait()


def failures(c: breakerd.Client, breaker: str) -> int:
    return int(c.get(breaker).get("failures", 0))


def expire_deadlines() -> None:
    """expire_deadlines moves this loop's clock an hour on: every
    deadline set on it (wait_for's, asyncio.timeout's) is past, at the
    point the call has reached, whatever the machine's speed."""
    loop = asyncio.get_running_loop()
    now = loop.time
    setattr(loop, "time", lambda: now() + 3600)


async def hang_past_deadline() -> None:
    expire_deadlines()
    await hang()


async def test_wait_for_deadline_counts_as_a_timeout(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("vendor")
    c = client(daemon, worker="w1")
    guarded = c.guard(b)(hang_past_deadline)
    for i in range(2):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(guarded(), 60)
        await until(lambda: failures(c, b) == i + 1, f"timeout {i + 1} counted")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is Python 3.11+")
async def test_asyncio_timeout_counts_as_a_timeout(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("vendor")
    c = client(daemon, worker="w1")
    g = c.guard(b)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(60):  # type: ignore[attr-defined,unused-ignore]
            async with g:
                await hang_past_deadline()
    await until(lambda: g.result is not None, "the record")
    assert g.result is not None and g.result["classified_as"] == "OUTCOME_TIMEOUT"
    assert failures(c, b) == 1


async def test_a_deadline_during_the_allow_releases_the_permit_uncounted(
        daemon: Daemon, name: Callable[[str], str]) -> None:
    """The deadline passes while the Allow is outstanding (its daemon
    stalled): the dependency was never called, so nothing is counted, and
    the permit the late answer brings is released by a Record of a cancel
    (the Record reaching the daemon is the witness)."""
    b = name("vendor")
    px = Proxy(urllib.parse.urlsplit(daemon.url).netloc)
    # The client's own bounds outlast expire_deadlines' hour: only the
    # caller's deadline passes, and the Allow is still waiting for breakerd
    # (with 30 s bounds, the client's timer could fire first on a busy host
    # and answer from the fallback).
    c = breakerd.Client(px.url, worker_id="w1", watch=False, allow_budget=7200.0, rpc_timeout=7200.0)
    try:
        c.check()
        px.stall()
        sent = c.transport.calls
        call = asyncio.ensure_future(asyncio.wait_for(c.guard(b)(hang)(), 60))
        await until(lambda: c.transport.calls == sent + 1, "the Allow under way")
        expire_deadlines()
        with pytest.raises(TimeoutError):
            await call
        px.restore()
        await until(lambda: px.methods["Record"] == 1, "the unused permit released")
        assert px.methods["Allow"] == 1
        assert failures(c, b) == 0
    finally:
        c.close()
        px.close()


async def test_guard_deadline_spent_counts_as_a_timeout(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("vendor")
    c = client(daemon, worker="w1")
    g = c.guard(b, deadline=0.0)
    task = asyncio.create_task(_run_in(g))
    await until(lambda: g.permit is not None, "the call under way")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert g.result is not None and g.result["classified_as"] == "OUTCOME_TIMEOUT"


async def _run_in(g: breakerd.Guard) -> None:
    async with g:
        await hang()


async def test_plain_cancel_is_never_counted(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("vendor")
    c = client(daemon, worker="w1")
    g = c.guard(b)
    task = asyncio.create_task(_run_in(g))
    await until(lambda: g.permit is not None, "the call under way")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: g.result is not None, "the record")
    assert g.result is not None and g.result["classified_as"] == "OUTCOME_CANCELED"
    assert failures(c, b) == 0
