"""guard: Allow, run the call, Record what it raised, re-raise."""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar, Union, cast, overload

from . import _otel, _render
from ._deadline import cancel_was_deadline, cancelling, waited_on_by_timed_out
from ._errors import CircuitOpen
from ._evidence import KIND_CANCELLED, KIND_TIMEOUT
from ._limits import DEADLINE, check, check_name, check_tool, clamp_ms

if TYPE_CHECKING:
    from ._client import Client, Permit
    from ._run import Run

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

# Exclude is what a guard's ``exclude`` takes, as pybreaker's does: an
# exception type, a predicate over the exception, or an iterable of them.
ExcludeRule = Union[type[BaseException], Callable[[BaseException], bool]]
Exclude = Union[ExcludeRule, Iterable[ExcludeRule], None]

# What an excluded error is recorded as: the never-counted outcome of a
# request that was wrong, not of a dependency that failed.
EXCLUDED_OUTCOME = "OUTCOME_INVALID_ARGUMENT"


def excluded(exc: BaseException | None, rule: Exclude) -> bool:
    """excluded says whether exc is one of rule's: an instance of one of
    its types, or one its predicates holds for."""
    if exc is None or rule is None:
        return False
    rules = [rule] if isinstance(rule, type) or callable(rule) else list(rule)
    for r in rules:
        if isinstance(r, type):
            if isinstance(exc, r):
                return True
        elif r(exc):
            return True
    return False


class Guard:
    """Guard protects calls to one breaker's dependency. As a decorator it
    guards every call of the function (sync or async); as a context
    manager (``with`` or ``async with``) it guards one block, so make a
    new one per block (``with client.guard(...)`` does). A denial raises
    CircuitOpen before the call; whatever the call raises is recorded as
    evidence and re-raised; a cancel (asyncio's, Ctrl-C) is recorded as
    a cancel, never counted, unless a deadline caused it (``deadline``
    spent, ``asyncio.timeout``, ``asyncio.wait_for``): that is a timeout
    (``_deadline``). An error ``exclude`` names (exception types, or
    predicates over the exception) is not the dependency's fault: it is
    recorded as EXCLUDED_OUTCOME, never counted, and re-raised. The
    breaker's name, the tool's and the deadline are checked when the
    guard is made (InvalidArgument naming the field), so a decorator
    fails at import."""

    def __init__(self, client: Client, breaker: str, *, tool: str = "", deadline: float | None = None,
                 exclude: Exclude = None) -> None:
        check_name("breaker", breaker)
        check_tool(tool)
        check("deadline", DEADLINE, deadline)
        self.client = client
        self.breaker = breaker
        self.tool = tool
        self.deadline = deadline
        self.exclude = exclude
        self._new_call()

    def _new_call(self) -> None:
        """What one call holds, none of it yet."""
        self.permit: Permit | None = None
        self.result: dict[str, Any] | None = None
        self._started = 0.0
        self._span: Any = None  # _otel.start_tool's, ended with the call

    # -- one call ----------------------------------------------------------

    def _admit(self, p: Permit) -> Permit:
        if not p.allowed:
            raise p.denial()
        self.permit, self._started = p, time.monotonic()
        return p

    def _report(self, exc: BaseException | None) -> tuple[Permit, BaseException | None, dict[str, Any]]:
        p = self.permit
        if p is None:
            raise RuntimeError("guard: exit without enter")
        self.permit = None
        elapsed = time.monotonic() - self._started
        kw: dict[str, Any] = {"latency_ms": clamp_ms(int(elapsed * 1000))}
        if self.deadline is not None:
            kw["deadline_ms"] = clamp_ms(int((self.deadline - elapsed) * 1000))
        if excluded(exc, self.exclude):
            kw["outcome"] = EXCLUDED_OUTCOME
        return p, exc, kw

    def _check(self) -> None:
        if self.permit is not None:
            raise RuntimeError("guard: one block at a time; make a new guard per block")

    def _known_denial(self) -> None:
        """_known_denial raises a denial known with no round trip (a
        RunGuard's lost tool); a plain guard knows none."""

    def _end_span(self) -> None:
        started, self._span = self._span, None
        _otel.end_tool(started)

    def __enter__(self) -> Permit:
        self._check()
        self._span = _otel.start_tool(self.tool or self.breaker)
        try:
            self._known_denial()
            return self._admit(self.client.allow(self.breaker, tool=self.tool))
        except BaseException:  # a denial among them: the span ends with it
            self._end_span()
            raise

    def __exit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            p, e, kw = self._report(exc)
            self.result = self.client.record(p, e, **kw)
        finally:
            self._end_span()

    async def __aenter__(self) -> Permit:
        self._check()
        self._span = _otel.start_tool(self.tool or self.breaker)
        try:
            return await self._aenter()
        except BaseException:
            self._end_span()
            raise

    async def __aexit__(self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            await self._aexit(exc)
        finally:
            self._end_span()

    async def _aenter(self) -> Permit:
        self._known_denial()
        here = self.client._allow_here(self.breaker, self.tool)  # answered in-process: no task to shield
        if here is not None:
            _otel.decision(here)
            return self._admit(here)
        asked = asyncio.ensure_future(self.client.aio.allow(self.breaker, tool=self.tool))
        try:
            p = await asyncio.shield(asked)
        except asyncio.CancelledError:
            # Cancelled (a deadline too) before the call began: the
            # dependency was never called, so nothing is counted, but the
            # permit the Allow brings is released (a probe lease at once).
            asked.add_done_callback(self._release)
            raise
        return self._admit(p)

    def _release(self, asked: asyncio.Future[Permit]) -> None:
        if asked.cancelled() or asked.exception() is not None or not asked.result().allowed:
            return
        _later(self._record_unused(asked.result()))

    async def _record_unused(self, p: Permit) -> None:
        try:
            self.result = await self.client.aio.record(p, None, evidence={"error_kind": KIND_CANCELLED})
        except Exception as e:  # no caller is left to raise it to
            logging.getLogger("breakerd").warning("breakerd: the release of an unused permit for %s failed: %s", p.breaker, e)

    async def _aexit(self, exc: BaseException | None) -> None:
        p, e, kw = self._report(exc)
        task = asyncio.current_task()
        if isinstance(exc, asyncio.CancelledError) and task is not None and "outcome" not in kw:
            spent = self.deadline is not None and kw.get("deadline_ms", 1) <= 0
            if spent or waited_on_by_timed_out(task):
                kw["evidence"] = {"error_kind": KIND_TIMEOUT}
            else:
                # Known once the cancellation has left this task: a
                # timeout context takes it back. The record goes then.
                _later(self._record_cancel(task, cancelling(task), p, kw))
                return
        # A cancelled task may still await once more: the record of its
        # cancel is what releases a probe lease at once. One answered
        # in-process (fast mode, the fallback) needs no task.
        ev, outcome = kw.pop("evidence", None), kw.pop("outcome", None)
        body, verdict, here = self.client._record_start(p, e, ev, kw["latency_ms"], kw.get("deadline_ms"), "", outcome)
        if here is not None:
            self.result = here
            return
        self.result = await asyncio.shield(self.client.aio._send_record(p, body, verdict))

    async def _record_cancel(self, task: asyncio.Task[Any], pending: int, p: Permit, kw: dict[str, Any]) -> None:
        timed_out = await cancel_was_deadline(task, pending)
        kw["evidence"] = {"error_kind": KIND_TIMEOUT if timed_out else KIND_CANCELLED}
        try:
            self.result = await self.client.aio.record(p, None, **kw)
        except Exception as e:  # no caller is left to raise it to
            logging.getLogger("breakerd").warning("breakerd: the record of a cancelled call to %s failed: %s", p.breaker, e)

    # -- decorator ---------------------------------------------------------

    @overload
    def __call__(self, fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]: ...
    @overload
    def __call__(self, fn: Callable[..., R]) -> Callable[..., R]: ...

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                async with self._fresh():
                    return await fn(*args, **kwargs)

            return guarded_async

        @functools.wraps(fn)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            with self._fresh():
                return fn(*args, **kwargs)

        return cast(Callable[..., Any], guarded)

    def _fresh(self) -> Guard:
        """A guard for one more call: this one's settings, checked when it
        was made, and none of a call's state."""
        g = copy.copy(self)
        g._new_call()
        return g


# The records sent after a cancellation, held until sent (the loop keeps
# only weak references to tasks).
_pending: set[asyncio.Task[None]] = set()


def _later(coro: Coroutine[Any, Any, None]) -> None:
    t = asyncio.get_running_loop().create_task(coro)
    _pending.add(t)
    t.add_done_callback(_pending.discard)


class RunGuard(Guard):
    """RunGuard is a Guard for one tool of a Run: a tool the run lost is
    denied with no round trip, and a denial removes the tool."""

    def __init__(self, run: Run, tool: str, *, deadline: float | None = None, exclude: Exclude = None) -> None:
        super().__init__(run.client, run.breaker_of(tool), tool=tool, deadline=deadline, exclude=exclude)
        self.run = run

    def _known_denial(self) -> None:
        from ._client import Permit

        for u in self.run.degraded:
            if u.tool == self.tool:
                now = self.client.cache.now_redis_ms()  # the clock the denial's times are on
                d = u.denial
                _otel.decision(Permit(breaker=u.breaker, decision=u.decision, tool=u.tool, degraded=u.degraded,
                                      cached=True, verdict=d))
                raise CircuitOpen(breaker=u.breaker, decision=u.decision, reason=u.reason,
                                  retry_after_ms=d.retry_after_ms(now),
                                  tool_result=_render.tool_result(d, u.tool, u.alternatives, u.degraded, now),
                                  tool=u.tool, scope=u.scope, alternatives=u.alternatives, degraded=u.degraded,
                                  state=dict(u.state), denial=d)

    def _admit(self, p: Permit) -> Permit:
        if not p.allowed:
            d = p.denial()
            self.run.lose(self.tool, d)
            raise d
        return super()._admit(p)
