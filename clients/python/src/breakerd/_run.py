"""Run: one agent run's toolset, with the tools it lost kept out."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from . import _otel
from . import _render
from ._denial import Denial, int64, of_state
from ._errors import CircuitOpen
from ._transport import Outage

if TYPE_CHECKING:
    from ._client import Client
    from ._guard import Exclude, Guard

T = TypeVar("T")


def tool_name(tool: object) -> str:
    """tool_name reads a tool's name the way each framework keeps it: a
    string, a mapping's ``name`` (Anthropic's tools, OpenAI's Responses
    tools) or ``function.name`` (OpenAI's Chat Completions tools), or an
    object's ``name`` attribute (the Agents SDK's and LangChain's tools)."""
    if isinstance(tool, str):
        return tool
    if isinstance(tool, Mapping):
        name = tool.get("name")
        fn = tool.get("function")
        if not isinstance(name, str) and isinstance(fn, Mapping):
            name = fn.get("name")
        if isinstance(name, str):
            return name
    name = getattr(tool, "name", None)
    if isinstance(name, str):
        return name
    raise TypeError(f"a tool needs a name: {type(tool).__name__} has none")


@dataclass(frozen=True)
class Unavailable:
    """Unavailable says why a tool left a run: what the model's notice and
    the run's final result report."""

    tool: str
    breaker: str
    decision: str
    reason: str
    # Until when the denial holds, ms since the epoch on breakerd's
    # clock; FOREVER until an operator acts.
    deny_until_ms: int
    removed_at_ms: int
    alternatives: tuple[str, ...] = ()
    # The parent scope that denied; "" when the breaker or this worker's
    # own verdict did.
    scope: str = ""
    degraded: bool = False
    state: Mapping[str, Any] = field(default_factory=dict)
    # The Denial the notice and a replayed denial render: breakerd's, or
    # the local fallback's.
    denial: Denial = field(default_factory=lambda: Denial("", "", ""))


class Run:
    """Run scopes one agent run. ``available(tools)`` returns the tools
    whose breakers allow now and removes the others for the rest of the
    run, even if their circuits close mid-run (the model's plan has been
    rebuilt around their absence); ``notice()`` is the text that tells the
    model. ``breakers`` maps a tool's name to its breaker (the dependency
    it calls); a tool missing from it is its own breaker. Safe for
    concurrent use."""

    def __init__(self, client: Client, breakers: Mapping[str, str] | Callable[[str], str] | None = None) -> None:
        self.client = client
        self._breakers = breakers
        self._lock = threading.Lock()
        self._removed: dict[str, Unavailable] = {}
        self._last: list[str] = []  # the tool names of the last toolset

    def breaker_of(self, tool: str) -> str:
        b = self._breakers
        if callable(b):
            return b(tool)
        if b is not None:
            return b.get(tool, tool)
        return tool

    @property
    def degraded(self) -> tuple[Unavailable, ...]:
        """The tools this run lost, in the order it lost them."""
        with self._lock:
            return tuple(self._removed.values())

    def removed(self, tool: str) -> bool:
        with self._lock:
            return tool in self._removed

    def available(self, tools: Sequence[T]) -> list[T]:
        """available returns the tools, in order, that this run still has
        and whose breakers do not deny now (one BatchGet round trip within
        the Allow budget; a breaker whose probe is due is kept, since
        calling it is how the fleet learns it recovered). When no daemon
        answers, the open cache and the local fallback judge, and the
        removals are marked degraded."""
        names, keep, breakers = self._ask(tools)
        states: list[dict[str, Any]] | None = None
        try:
            if breakers:
                if self.client.reach.down:
                    raise Outage("no daemon answers")  # the fallback answers at once
                states = self.client.batch_get(breakers, budget=self.client._budget(""))
        except Outage:
            states = None
        return self._keep(tools, names, keep, self._verdicts(breakers, states))

    def _ask(self, tools: Sequence[object]) -> tuple[list[str], list[str], list[str]]:
        """The tools' names, those this run still has, and their breakers
        (each once): what available asks breakerd about."""
        names = [tool_name(t) for t in tools]
        with self._lock:
            self._last = names
            keep = [n for n in names if n not in self._removed]
        return names, keep, list(dict.fromkeys(self.breaker_of(n) for n in keep))

    def _keep(self, tools: Sequence[T], names: list[str], keep: list[str],
              verdicts: dict[str, tuple[Mapping[str, Any], Denial, bool]]) -> list[T]:
        """Removes the tools whose breakers deny; the tools left, in order."""
        now = self.client._now_ms()
        for n in keep:
            v = verdicts.get(self.breaker_of(n))
            if v is not None:
                self._remove(n, *v, now)
        with self._lock:
            return [t for t, n in zip(tools, names) if n not in self._removed]

    def _verdicts(self, breakers: list[str],
                  states: list[dict[str, Any]] | None) -> dict[str, tuple[Mapping[str, Any], Denial, bool]]:
        """The denying states among breakers (none for one that allows),
        each with its Denial for this worker and whether a fallback
        judged (states None: no daemon answered)."""
        out: dict[str, tuple[Mapping[str, Any], Denial, bool]] = {}
        if not breakers:
            return out
        if states is None:
            for b in breakers:
                v = self._fallback_verdict(b)
                if v is not None:
                    out[b] = (*v, True)
            return out
        for st in states:
            self.client.cache.observe(st)
            d = of_state(st, self.client.worker_id)
            if d is not None and d.deny_until_ms > int64(st.get("as_of_ms")):
                out[str(st.get("breaker", ""))] = (st, d, False)
        return out

    def _fallback_verdict(self, breaker: str) -> tuple[Mapping[str, Any], Denial] | None:
        cached = self.client.cache.denial(breaker, stale_ok=True)
        if cached is not None:
            return cached
        p = self.client._fallback_peek(breaker)
        return None if p is None or p.verdict is None else (p.state, p.verdict)

    def _remove(self, tool: str, st: Mapping[str, Any], d: Denial, degraded: bool, now: int) -> None:
        u = Unavailable(
            tool=tool,
            breaker=self.breaker_of(tool),
            decision=d.decision,
            reason=d.reason,
            deny_until_ms=d.deny_until_ms,
            removed_at_ms=now,
            alternatives=tuple(str(a) for a in st.get("alternatives", ()) or ()),
            scope=str(st.get("parent", "")) if d.scope_word == "parent" else "",
            degraded=degraded,
            state=dict(st),
            denial=d,
        )
        with self._lock:
            if tool in self._removed:
                return
            self._removed[tool] = u
        _otel.tool_removed(tool, u.breaker, d.status, degraded)
        # One tool a run left out, under the breaker that decided (the
        # parent scope when it did): reported to breakerd as saved.
        self.client.savings.add(u.scope or u.breaker, removed=1)

    def lose(self, tool: str, denial: CircuitOpen) -> None:
        """lose removes tool, and every tool of the last toolset sharing
        its breaker, after a denial met mid-run."""
        d = denial.denial
        if d is None:  # a daemon that sent no Denial: its own words, kept as they came
            d = Denial(denial.decision, "", denial.reason)
        with self._lock:
            sharing = [n for n in self._last if self.breaker_of(n) == denial.breaker] or [tool]
        now = self.client._now_ms()
        for n in dict.fromkeys([tool, *sharing]):
            self._remove(n, denial.state, d, denial.degraded, now)

    def guard(self, tool: str, *, deadline: float | None = None, exclude: Exclude = None) -> Guard:
        """guard is Client.guard for one of the run's tools: a tool the
        run lost is denied without a round trip, and a denial removes the
        tool from the run."""
        from ._guard import RunGuard

        return RunGuard(self, tool, deadline=deadline, exclude=exclude)

    def notice(self) -> str:
        """notice is the text to give the model about the tools this run
        lost (breakerd's notice template); empty when it lost none."""
        return _render.notice(self.degraded, self.client.cache.now_redis_ms())
