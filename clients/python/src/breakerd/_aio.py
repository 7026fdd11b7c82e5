"""The asyncio API: the same names as the synchronous one, as coroutines.

Allow, Record, Get, BatchGet, GetPolicy and a Run's available go over
``_aiotransport``: HTTP/1.1 on the loop's own keep-alive connections,
so a coroutine holds no thread while breakerd answers. An
AsyncClient wraps a Client (``.sync``) and shares all it knows (the open
cache, the fallback, the daemons that answer), so the two may be used
side by side. What is rare or slow stays on the Client's threads: closing
it, reporting savings, the background sends of the fallback's outcomes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from . import _otel
from ._aiotransport import AsyncTransport
from ._client import Client, Permit, states_of
from ._errors import BreakerdError
from ._evidence import Evidence
from ._fast import FastView
from ._guard import Exclude, Guard
from ._run import Run, Unavailable
from ._transport import Outage

T = TypeVar("T")

# Allow answers that came after the fallback's, held until taken (the
# loop keeps only weak references to tasks).
_late: set[asyncio.Future[dict[str, Any]]] = set()


def _wake(f: asyncio.Future[None]) -> None:
    if not f.done():
        f.set_result(None)


def _over(call: asyncio.Future[Any], woken: asyncio.Future[None]) -> None:
    """The call is over: its exception counts as read (a caller cancelled
    meanwhile never reads it, and asyncio would log it), and its caller,
    if still waiting, is woken."""
    if not call.cancelled():
        call.exception()
    _wake(woken)


async def available(run: Run, tools: Sequence[T]) -> list[T]:
    """available is ``run.available(tools)`` without blocking the event
    loop and without a thread: the one place the adapters ask for a run's
    toolset (AsyncRun.available)."""
    return await AsyncRun.of(run).available(tools)


class AsyncClient:
    """AsyncClient is Client for asyncio: the same constructor and
    methods, awaited, with no thread per call. ``guard`` is the same Guard
    (use ``async with``, or decorate an ``async def``). ``AsyncClient.of``
    wraps a Client already made."""

    def __init__(self, urls: str | Sequence[str] | None = None, **kwargs: Any) -> None:
        self._bind(Client(urls, **kwargs))

    @classmethod
    def of(cls, client: Client) -> AsyncClient:
        """of is the AsyncClient of client (the one client.aio returns)."""
        return client.aio

    @classmethod
    def _wrap(cls, client: Client) -> AsyncClient:
        self = cls.__new__(cls)
        self._bind(client)
        return self

    def _bind(self, client: Client) -> None:
        self.sync = client
        self.transport = AsyncTransport(client.transport)
        client._aio = self

    @property
    def worker_id(self) -> str:
        return self.sync.worker_id

    @property
    def degraded(self) -> bool:
        return self.sync.degraded

    @property
    def fast(self) -> FastView | None:
        """fast is fast mode's view, the Client's (None unless made with
        ``fast=True``): ``allowed`` and ``skipped`` count the Allows
        answered and the successes not sent in-process."""
        return self.sync.fast

    @property
    def aio(self) -> AsyncClient:
        """aio is this client itself, as Client.aio is a Client's
        AsyncClient: code handed either reaches the asyncio face the same
        way."""
        return self

    async def check(self) -> None:
        """check is Client.check on a thread: it raises BreakerdError
        naming the cause unless a breakerd daemon answers this client,
        with its token."""
        await asyncio.to_thread(self.sync.check)

    async def close(self) -> None:
        self.transport.close()
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def call(self, method: str, body: dict[str, Any], budget: float | None = None,
                   started: float | None = None) -> dict[str, Any]:
        """call is Client.call awaited: one BreakerService method's JSON
        answer; Outage when no daemon answered within budget (default: the
        RPC timeout) from started (time.monotonic; default: now)."""
        c = self.sync
        budget = budget if budget is not None else c.rpc_timeout
        began = c.transport._clock() if started is None else started
        try:
            out = await self.transport.call(method, body, budget, began)
        except Outage as e:
            c._unanswered(e, budget, began)
            raise
        except BreakerdError:
            c._heard()  # a refusal is an answer
            raise
        c._answered()
        return out

    async def allow(self, breaker: str, *, tool: str = "") -> Permit:
        """allow is Client.allow awaited, with the same budgets and
        answers: a known denial and the fallback answer with no round
        trip; an answer past the Allow budget is the fallback's, and the
        late one still teaches the client. With OpenTelemetry installed
        the answer is recorded on the active span."""
        p = await self._allow(breaker, tool)
        _otel.decision(p)
        return p

    async def _allow(self, breaker: str, tool: str) -> Permit:
        c = self.sync
        here = c._allow_here(breaker, tool)
        if here is not None:
            return here
        budget = c._budget(breaker)
        started = time.monotonic()  # the transport's clock: a daemon holding this call past the budget is passed over
        loop = asyncio.get_running_loop()
        asked = loop.create_task(self.call("Allow", c._allow_body(breaker, tool), max(budget, c.rpc_timeout), started))
        # Woken by the answer or by the budget's end, whichever comes
        # first; a cancelled caller leaves the call to finish on its own
        # (as asyncio.shield would).
        woken = loop.create_future()
        timer = loop.call_at(loop.time() + budget, _wake, woken)
        asked.add_done_callback(lambda f: _over(f, woken))
        try:
            await woken
        finally:
            timer.cancel()
        if not asked.done():
            c._outage = True  # until an answer, late or not, comes
            given = c._fallback_allow(breaker, tool)
            _late.add(asked)
            asked.add_done_callback(lambda f: self._late_allow(f, given))
            return given
        try:
            ans = asked.result()
        except Outage:
            return c._fallback_allow(breaker, tool)
        return c._allowed(breaker, tool, ans)

    def _late_allow(self, f: asyncio.Future[dict[str, Any]], given: Permit) -> None:
        _late.discard(f)
        if f.cancelled() or f.exception() is not None:
            return  # no daemon answered: call() said so
        self.sync._late_allow(f, given)  # type: ignore[arg-type] # reads f.result() only

    async def record(self, permit: Permit, exc: BaseException | None = None, *, evidence: Evidence | None = None,
                     latency_ms: int = 0, deadline_ms: int | None = None, message: str = "",
                     outcome: str | None = None) -> dict[str, Any]:
        """record is Client.record awaited, with the same answers."""
        body, verdict, here = self.sync._record_start(permit, exc, evidence, latency_ms, deadline_ms, message, outcome)
        if here is not None:
            return here
        return await self._send_record(permit, body, verdict)

    async def _send_record(self, permit: Permit, body: dict[str, Any], verdict: bool | None) -> dict[str, Any]:
        """Sends a Record _record_start built, and takes its answer."""
        try:
            ans = await self.call("Record", body)
        except Outage:
            return self.sync._record_unanswered(permit, verdict)
        return self.sync._recorded(permit, verdict, ans)

    async def get(self, breaker: str) -> dict[str, Any]:
        st = (await self.call("Get", {"breaker": breaker})).get("state", {})
        return st if isinstance(st, dict) else {}

    async def batch_get(self, breakers: Sequence[str], budget: float | None = None) -> list[dict[str, Any]]:
        """batch_get is Client.batch_get awaited, its names checked the same way."""
        return states_of(await self.call("BatchGet", self.sync._batch_body(breakers), budget))

    async def get_policy(self, breaker: str) -> dict[str, Any]:
        return await self.call("GetPolicy", {"breaker": breaker})

    async def flush_savings(self) -> bool:
        return await asyncio.to_thread(self.sync.flush_savings)

    @property
    def saved_denials_reported(self) -> int:
        return self.sync.saved_denials_reported

    @property
    def tools_removed_reported(self) -> int:
        return self.sync.tools_removed_reported

    def guard(self, breaker: str, *, tool: str = "", deadline: float | None = None, exclude: Exclude = None) -> Guard:
        return self.sync.guard(breaker, tool=tool, deadline=deadline, exclude=exclude)


class AsyncRun:
    """AsyncRun is Run for asyncio: ``await run.available(tools)``."""

    def __init__(self, client: AsyncClient, breakers: Mapping[str, str] | Callable[[str], str] | None = None) -> None:
        self.sync = Run(client.sync, breakers)
        self.client = client

    @property
    def degraded(self) -> tuple[Unavailable, ...]:
        return self.sync.degraded

    def breaker_of(self, tool: str) -> str:
        return self.sync.breaker_of(tool)

    @classmethod
    def of(cls, run: Run) -> AsyncRun:
        """of is the asyncio face of run (the same toolset, shared)."""
        r = cls.__new__(cls)
        r.sync, r.client = run, run.client.aio
        return r

    async def available(self, tools: Sequence[T]) -> list[T]:
        """available is Run.available awaited: one BatchGet round trip
        within the Allow budget, the fallback's verdicts when none
        answers."""
        r, c = self.sync, self.client.sync
        names, keep, breakers = r._ask(tools)
        states: list[dict[str, Any]] | None = None
        if breakers and not c.reach.down:
            try:
                states = await self.client.batch_get(breakers, budget=c._budget(""))
            except Outage:
                states = None
        return r._keep(tools, names, keep, r._verdicts(breakers, states))

    def notice(self) -> str:
        return self.sync.notice()

    def guard(self, tool: str, *, deadline: float | None = None, exclude: Exclude = None) -> Guard:
        return self.sync.guard(tool, deadline=deadline, exclude=exclude)
