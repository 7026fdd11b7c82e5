"""Fast mode's view (``Client(fast=True)``): breakerd's last word on each
breaker this client uses, kept current by the watch stream (transitions,
Forces, run notices), so that a healthy breaker's Allow is answered
in-process and a success that could change nothing is not sent.

It holds no breaker rule: a breaker is answered here only while
breakerd's own last word is "closed, nothing denied" and the stream is
live; a denial, the one probe, a breaker with a parent or in shadow, and
a suspect are breakerd's (a denial the stream carried is the open
cache's: the daemon's Denial, rendered through the shared templates).
docs/python.md#fast-mode has the bounds.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ._denial import int64

# The breakers the view holds at most; past it a breaker is asked as in
# strict mode.
MAX_FAST_BREAKERS = 4096

# A fast-mode success's answer: it would have changed nothing in breakerd.
FAST_NOT_SENT = "not sent: the breaker is closed with no failure run (fast mode)"


@dataclass(frozen=True)
class _Entry:
    gen: int
    as_of: int
    healthy: bool  # closed, nothing denied, no one else to judge: an Allow is answered here
    run: bool  # a success would change the breaker
    window: bool  # every success counts (window mode): none is skipped
    slow_ms: int  # the policy's slow_call, ms (0: none)
    state: dict[str, Any]
    ticket: dict[str, Any]  # the ticket of an Allow answered here (one per entry: a permit holds nothing of its call)


def plain_success(ev: dict[str, Any]) -> bool:
    """plain_success says evidence is a success by its face, with nothing
    for breakerd to read: none at all, or a 2xx status alone."""
    for k, v in ev.items():
        if k == "no_deadline":
            continue
        if k == "http_status" and isinstance(v, int) and 200 <= v < 300:
            continue
        return False
    return True


class FastView:
    """FastView is the fast-mode view. Safe for concurrent use."""

    def __init__(self, only: Sequence[str] = ()) -> None:
        self._only = frozenset(only)  # the breakers the watch stream follows; empty: every breaker
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._used: set[str] = set()
        self.allowed = 0  # Allows answered here
        self.skipped = 0  # successes not sent

    def use(self, breaker: str) -> None:
        """use marks breaker as one this client asks about (a breaker the
        stream does not follow, never)."""
        if self._only and breaker not in self._only:
            return
        if breaker not in self._used and len(self._used) < MAX_FAST_BREAKERS:
            with self._lock:
                self._used.add(breaker)

    def used(self, breaker: str) -> bool:
        """used says breaker is one use marked (so its name was checked)."""
        return breaker in self._used

    def learn(self, st: dict[str, Any]) -> None:
        """learn takes a state breakerd returned or the stream carried,
        unless the view holds a later one."""
        name = st.get("breaker")
        if not isinstance(name, str) or name not in self._used:
            return
        gen, as_of = int64(st.get("generation")), int64(st.get("as_of_ms"))
        closed = st.get("state", "STATE_CLOSED") == "STATE_CLOSED"
        suspect = bool(st.get("suspect_worker"))
        e = _Entry(gen=gen, as_of=as_of,
                   healthy=closed and not st.get("denial") and not st.get("parent") and st.get("shadow") is not True
                   and not suspect,
                   run=not closed or int64(st.get("failures")) > 0 or int64(st.get("slow_calls")) > 0 or suspect,
                   window=st.get("window_mode") is True, slow_ms=int64(st.get("slow_call_ms")), state=st,
                   ticket={"generation": str(gen)})
        with self._lock:
            old = self._entries.get(name)
            if old is not None and (old.gen > gen or (old.gen == gen and old.as_of > as_of)):
                return
            self._entries[name] = e

    def event(self, ev: dict[str, Any]) -> bool:
        """event takes one watch event: a run notice moves the run flag
        (True: handled here); any other event without a state forgets the
        breaker (the open cache reads it afresh, which teaches the view)."""
        name, kind = ev.get("breaker"), ev.get("kind")
        if not isinstance(name, str):
            return False
        with self._lock:
            old = self._entries.get(name)
            if kind in ("EVENT_KIND_RUN_STARTED", "EVENT_KIND_RUN_ENDED"):
                gen = int64(ev.get("generation"))
                if old is not None and old.gen == gen:
                    self._entries[name] = replace(old, run=kind == "EVENT_KIND_RUN_STARTED" or not old.healthy)
                elif old is not None and old.gen < gen:
                    del self._entries[name]  # a transition the view missed: breakerd answers next
                return True
            if old is not None and not isinstance(ev.get("state"), dict):
                del self._entries[name]
        return False

    def allow(self, breaker: str, live: bool) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """allow is (ticket, state) of an Allow answered here, or None:
        breakerd is asked."""
        e = self._entries.get(breaker)
        if not live or e is None or not e.healthy:
            return None
        self.allowed += 1
        return e.ticket, e.state

    def skip(self, breaker: str, ticket: dict[str, Any], latency_ms: int, live: bool) -> bool:
        """skip says a success under ticket need not be sent: closed with
        no run, no window, not slow, the stream live."""
        e = self._entries.get(breaker)
        if not live or e is None or not e.healthy or e.run or e.window:
            return False
        if e.slow_ms > 0 and latency_ms > e.slow_ms:
            return False
        if ticket is not e.ticket and e.gen < int64(ticket.get("generation")):
            return False
        self.skipped += 1
        return True

    def failed(self, breaker: str, ticket: dict[str, Any]) -> None:
        """failed marks a run this worker's own failure started, at once."""
        with self._lock:
            e = self._entries.get(breaker)
            if e is not None and e.gen == int64(ticket.get("generation")):
                self._entries[breaker] = replace(e, run=True)
