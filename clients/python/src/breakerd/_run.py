"""Run: one agent run's toolset, with the tools it lost kept out."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from . import _render
from ._errors import CircuitOpen
from ._transport import Outage

if TYPE_CHECKING:
    from ._client import Client
    from ._guard import Guard

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


def _denies(st: Mapping[str, Any]) -> bool:
    """A state denies when its deny_until_ms is past the Redis clock's
    reading it was taken at."""
    return _int(st.get("deny_until_ms")) > _int(st.get("as_of_ms")) > 0


def _int(v: object) -> int:
    try:
        return int(v) if isinstance(v, (int, str)) and not isinstance(v, bool) else 0
    except ValueError:
        return 0


@dataclass(frozen=True)
class Unavailable:
    """Unavailable says why a tool left a run: what the model's notice and
    the run's final result report."""

    tool: str
    breaker: str
    decision: str
    reason: str
    # When the breaker may allow again, ms since the epoch on breakerd's
    # clock; 0 when unknown, _render.FOREVER until an operator acts.
    deny_until_ms: int
    removed_at_ms: int
    alternatives: tuple[str, ...] = ()
    scope: str = ""
    degraded: bool = False
    state: Mapping[str, Any] = field(default_factory=dict)


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
        names = [tool_name(t) for t in tools]
        with self._lock:
            self._last = names
            keep = [n for n in names if n not in self._removed]
        breakers = list(dict.fromkeys(self.breaker_of(n) for n in keep))
        verdicts = self._verdicts(breakers)
        now = self.client._now_ms()
        for n in keep:
            st, degraded = verdicts.get(self.breaker_of(n), ({}, False))
            if st:
                self._remove(n, st, degraded, now)
        with self._lock:
            return [t for t, n in zip(tools, names) if n not in self._removed]

    def _verdicts(self, breakers: list[str]) -> dict[str, tuple[dict[str, Any], bool]]:
        """The denying states among breakers (none for one that allows),
        and whether the fallback judged. A breaker denied by its parent
        scope (deny_until_ms includes the parent's verdict) gets the
        parent's state, read in a second BatchGet, for its reason."""
        out: dict[str, tuple[dict[str, Any], bool]] = {}
        if not breakers:
            return out
        try:
            if self.client.reach.down:
                raise Outage("no daemon answers")  # the fallback answers at once
            states = self.client.batch_get(breakers, budget=self.client._budget(""))
        except Outage:
            for b in breakers:
                out[b] = (self._fallback_state(b), True)
            return out
        for st in states:
            self.client.cache.observe(st)
            if _denies(st):
                out[str(st.get("breaker", ""))] = (st, False)
        parents = {b: str(st.get("parent")) for b, (st, _) in out.items()
                   if st.get("parent") and _render.decision_of(st) == "DECISION_DENIED_PARENT_OPEN"}
        if parents:
            try:
                by_name = {str(p.get("breaker")): p for p in self.client.batch_get(sorted(set(parents.values())))}
            except Outage:
                by_name = {}
            for b, parent in parents.items():
                p = by_name.get(parent)
                if p is not None and _denies(p):
                    out[b] = ({**p, "parent": parent, "scope_of": b}, False)
        return out

    def _fallback_state(self, breaker: str) -> dict[str, Any]:
        st = self.client.cache.denial(breaker, stale_ok=True)
        if st is not None:
            return st
        d = self.client.local.peek(breaker)
        if d is None:
            return {}
        return {"breaker": breaker, "reason": d.reason, "state": "STATE_OPEN",
                "deny_until_ms": str(self.client._now_ms() + d.retry_after_ms)}

    def _remove(self, tool: str, st: Mapping[str, Any], degraded: bool, now: int, decision: str = "") -> None:
        if not decision:
            decision = "DECISION_DENIED_PARENT_OPEN" if "scope_of" in st else _render.decision_of(st)
        u = Unavailable(
            tool=tool,
            breaker=self.breaker_of(tool),
            decision=decision,
            reason=str(st.get("reason", "")),
            deny_until_ms=_int(st.get("deny_until_ms")),
            removed_at_ms=now,
            alternatives=tuple(str(a) for a in st.get("alternatives", ()) or ()),
            scope=str(st.get("parent", "")) if decision == "DECISION_DENIED_PARENT_OPEN" else "",
            degraded=degraded,
            state=dict(st),
        )
        with self._lock:
            if tool in self._removed:
                return
            self._removed[tool] = u
        # One tool a run left out, under the breaker that decided (the
        # parent scope when it did): reported to breakerd as saved.
        self.client.savings.add(u.scope or u.breaker, removed=1)

    def lose(self, tool: str, denial: CircuitOpen) -> None:
        """lose removes tool, and every tool of the last toolset sharing
        its breaker, after a denial met mid-run."""
        now = self.client._now_ms()
        st = dict(denial.state)
        st.setdefault("reason", denial.reason)
        if "deny_until_ms" not in st and denial.retry_after_ms:
            st["deny_until_ms"] = str(now + denial.retry_after_ms)
        with self._lock:
            sharing = [n for n in self._last if self.breaker_of(n) == denial.breaker] or [tool]
        for n in dict.fromkeys([tool, *sharing]):
            self._remove(n, st, denial.degraded, now, denial.decision)

    def guard(self, tool: str, *, deadline: float | None = None) -> Guard:
        """guard is Client.guard for one of the run's tools: a tool the
        run lost is denied without a round trip, and a denial removes the
        tool from the run."""
        from ._guard import RunGuard

        return RunGuard(self, tool, deadline=deadline)

    def notice(self) -> str:
        """notice is the text to give the model about the tools this run
        lost (breakerd's notice template); empty when it lost none."""
        return _render.notice(self.degraded, self.client._now_ms())
