"""The asyncio API: the same names as the synchronous one, as coroutines.

Each call runs the synchronous transport in a worker thread
(``asyncio.to_thread``): the standard library has no asyncio HTTP client,
and a thread per call in flight costs less than a dependency would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ._client import Client, Permit
from ._evidence import Evidence
from ._guard import Exclude, Guard
from ._run import Run, Unavailable

T = TypeVar("T")


async def available(run: Run, tools: Sequence[T]) -> list[T]:
    """available is ``run.available(tools)`` without blocking the event
    loop: the one place the asyncio API and the adapters ask for a run's
    toolset (today in a worker thread)."""
    return await asyncio.to_thread(run.available, tools)


class AsyncClient:
    """AsyncClient is Client for asyncio: the same constructor and
    methods, awaited. ``guard`` is the same Guard (use ``async with``, or
    decorate an ``async def``)."""

    def __init__(self, urls: str | Sequence[str] | None = None, **kwargs: Any) -> None:
        self.sync = Client(urls, **kwargs)

    @property
    def worker_id(self) -> str:
        return self.sync.worker_id

    @property
    def degraded(self) -> bool:
        return self.sync.degraded

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def allow(self, breaker: str, *, tool: str = "") -> Permit:
        return await asyncio.to_thread(self.sync.allow, breaker, tool=tool)

    async def record(self, permit: Permit, exc: BaseException | None = None, *, evidence: Evidence | None = None,
                     latency_ms: int = 0, deadline_ms: int | None = None, message: str = "",
                     outcome: str | None = None) -> dict[str, Any]:
        return await asyncio.to_thread(self.sync.record, permit, exc, evidence=evidence, latency_ms=latency_ms,
                                       deadline_ms=deadline_ms, message=message, outcome=outcome)

    async def get(self, breaker: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.sync.get, breaker)

    async def batch_get(self, breakers: Sequence[str]) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.sync.batch_get, breakers)

    async def get_policy(self, breaker: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.sync.get_policy, breaker)

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

    @property
    def degraded(self) -> tuple[Unavailable, ...]:
        return self.sync.degraded

    def breaker_of(self, tool: str) -> str:
        return self.sync.breaker_of(tool)

    @classmethod
    def of(cls, run: Run) -> AsyncRun:
        """of is the asyncio face of run (the same toolset, shared)."""
        r = cls.__new__(cls)
        r.sync = run
        return r

    async def available(self, tools: Sequence[T]) -> list[T]:
        return await available(self.sync, tools)

    def notice(self) -> str:
        return self.sync.notice()

    def guard(self, tool: str, *, deadline: float | None = None, exclude: Exclude = None) -> Guard:
        return self.sync.guard(tool, deadline=deadline, exclude=exclude)
