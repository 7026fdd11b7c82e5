"""A guarded call ended by the caller's deadline is a timeout, counted by
a real daemon; a call cancelled for another reason is a cancel, never
counted. The daemon's breaker state (its failure count) is the witness."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

import pytest

import breakerd

from .conftest import Daemon
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


async def past_deadline(started: asyncio.Event, deadline: float) -> None:
    """Moves the loop's clock past deadline (seconds) once the guarded
    call is under way: the deadline falls inside the call, however long
    a busy machine took to Allow it."""
    await started.wait()
    loop = asyncio.get_running_loop()
    real = loop.time
    loop.time = lambda: real() + 2 * deadline  # type: ignore[method-assign]


async def test_wait_for_deadline_counts_as_a_timeout(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("vendor")
    c = client(daemon, worker="w1")
    started = asyncio.Event()

    async def call() -> None:
        started.set()
        await hang()

    guarded = c.guard(b)(call)
    loop = asyncio.get_running_loop()
    real = loop.time
    for i in range(2):
        started.clear()
        with pytest.raises(TimeoutError):
            await asyncio.gather(asyncio.wait_for(guarded(), 60), past_deadline(started, 60))
        loop.time = real  # type: ignore[method-assign]
        await until(lambda: failures(c, b) == i + 1, f"timeout {i + 1} counted")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is Python 3.11+")
async def test_asyncio_timeout_counts_as_a_timeout(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("vendor")
    c = client(daemon, worker="w1")
    g = c.guard(b)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(None) as cm:  # type: ignore[attr-defined,unused-ignore]
            async with g:
                cm.reschedule(asyncio.get_running_loop().time() + 0.05)  # the deadline falls inside the call
                await hang()
    await until(lambda: g.result is not None, "the record")
    assert g.result is not None and g.result["classified_as"] == "OUTCOME_TIMEOUT"
    assert failures(c, b) == 1


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
