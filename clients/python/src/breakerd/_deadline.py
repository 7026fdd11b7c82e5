"""Whether an asyncio cancellation was the caller's deadline.

A deadline reaches a coroutine as a cancellation: ``asyncio.timeout``
(and, from Python 3.12, ``asyncio.wait_for``) cancels the task it runs
in and, on the way out, takes the cancellation back (``uncancel``) and
raises TimeoutError; ``asyncio.wait_for`` on 3.10 and 3.11 runs the
awaited coroutine in a task of its own, cancels that task when the
timer fires, and raises TimeoutError in the waiting task. A cancellation
no deadline caused (``task.cancel()``, a TaskGroup, shutdown) says
nothing of the dependency and is never counted. ``cancel_was_deadline``
tells them apart once the cancellation has left the guarded block.
"""

from __future__ import annotations

import asyncio
from types import CoroutineType
from typing import Any

# How many loop turns a cancellation may take to leave the task (a
# ``finally`` that awaits) before it is taken as a plain cancel.
_MAX_TURNS = 64


def cancelling(task: asyncio.Task[Any] | None) -> int:
    """cancelling is the task's count of pending cancellations (0 before
    Python 3.11, which does not count them)."""
    fn = getattr(task, "cancelling", None)
    return int(fn()) if callable(fn) else 0


async def cancel_was_deadline(task: asyncio.Task[Any], pending: int) -> bool:
    """cancel_was_deadline waits (a few loop turns) until the cancellation
    the task had pending when its guarded block ended is resolved: True
    when a timeout context took it back, False for a plain cancel. Run it
    outside the cancelled task (``waited_on_by_timed_out`` is the test to
    make before, while the cancellation is still in the block)."""
    for _ in range(_MAX_TURNS):
        if task.done():
            return False
        if pending and cancelling(task) < pending:
            return True  # uncancelled: asyncio.timeout turned it into TimeoutError
        await asyncio.sleep(0)
    return False


def waited_on_by_timed_out(task: asyncio.Task[Any]) -> bool:
    """waited_on_by_timed_out says whether a task of this loop waits in ``asyncio.wait_for`` (3.10,
    3.11) on task after its timer fired: its waiter is done and was not
    cancelled (a cancel of the waiting task cancels the waiter)."""
    for other in asyncio.all_tasks(task.get_loop()):
        if other is task:
            continue
        coro: Any = other.get_coro()
        while isinstance(coro, CoroutineType):
            frame = coro.cr_frame
            if frame is not None and frame.f_code.co_name == "wait_for" and frame.f_locals.get("fut") is task:
                waiter = frame.f_locals.get("waiter")
                return isinstance(waiter, asyncio.Future) and waiter.done() and not waiter.cancelled()
            coro = coro.cr_await
    return False
