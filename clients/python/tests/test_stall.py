"""The watch stream that stalls: a server of the test's own stands where
the daemon would, announces a short heartbeat interval, and keeps the
stream open with nothing on it. The client drops it after three silent
intervals, is degraded meanwhile, reconnects, and a force lifted during
the stall stops denying. A snapshot in parts replaces the view once."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import breakerd

from .test_cache import Streams, wait_for

FOREVER = "9223372036854775807"


def denial(until: str, **kw: Any) -> dict[str, Any]:
    """The Denial a daemon sends with a denying state."""
    return {"decision": "DECISION_DENIED_OPEN", "scope": "DENIAL_SCOPE_BREAKER", "deny_until_ms": until,
            "reason": "it is failing", "status": "circuit_open", **kw}


FORCED = denial(FOREVER, decision="DECISION_DENIED_FORCED_OPEN", forced=True, status="forced_open",
                reason="forced open by an operator: maintenance")


def part(states: list[Any], **extra: Any) -> str:
    return "event: snapshot\ndata: " + json.dumps({"states": states, **extra}) + "\n\n"


@pytest.fixture
def streams() -> Iterator[Callable[[list[list[str]]], Streams]]:
    made: list[Streams] = []

    def make(scripts: list[list[str]]) -> Streams:
        made.append(Streams(scripts, {}))
        return made[-1]

    yield make
    for s in made:
        s.close()


def test_a_stalled_stream_is_dropped_after_three_silent_intervals(streams: Callable[..., Streams]) -> None:
    now = [1_700_000_000.0]
    forced = {"breaker": "pinned", "state": "STATE_FORCED_OPEN", "forced_by": "ops", "deny_until_ms": FOREVER, "denial": FORCED,
              "as_of_ms": str(int(now[0] * 1000))}
    s = streams([
        # then silence: a stall, 1.5 s on (three intervals: long enough for
        # a busy host's test to see the first view before it is dropped)
        [part([forced], heartbeat_ms="500", more=True), part([], heartbeat_ms="500"), ""],
        [part([], heartbeat_ms=500)],  # the force was lifted meanwhile
    ])
    c = breakerd.Client(s.url, worker_id="w1", clock=lambda: now[0])
    try:
        wait_for(lambda: c.cache.snapshots >= 1, "the first snapshot")
        assert c.cache.denial("pinned") is not None, "both parts make the view"
        assert c.cache.heartbeat == 0.5, "the announced interval, from an int64 string"
        wait_for(lambda: len(s.last_ids) >= 2, "the reconnect after the stall")
        assert c.cache.stalls == 1
        wait_for(lambda: c.cache.snapshots >= 2, "the fresh snapshot")
        assert c.cache.denial("pinned") is None, "the lifted force no longer denies"
        assert not c.degraded
    finally:
        c.close()


def test_a_snapshot_in_parts_replaces_the_view_when_its_last_part_arrives(streams: Callable[..., Streams]) -> None:
    def open_(b: str) -> dict[str, Any]:
        until = str(int(time.time() * 1000) + 600_000)
        return {"breaker": b, "state": "STATE_OPEN", "deny_until_ms": until, "denial": denial(until)}

    s = streams([[part([open_("a")], more=True), "", part([open_("b")], more=False)]])
    c = breakerd.Client(s.url, worker_id="w1", watch_heartbeat=60)
    try:
        c.cache.observe(open_("old"))
        wait_for(lambda: len(s.last_ids) == 1, "the stream")
        assert c.cache.snapshots == 0 and not c.cache.live
        assert c.degraded, "degraded while the followed stream is not live"
        s.more.set()
        wait_for(lambda: c.cache.snapshots == 1, "the last part")
        assert c.cache.denial("a") is not None and c.cache.denial("b") is not None
        assert c.cache.denial("old") is None, "the complete snapshot replaced the view"
        assert not c.degraded
    finally:
        c.close()


def test_a_view_no_longer_heard_denies_for_a_bounded_time(streams: Callable[..., Streams]) -> None:
    now = [1_700_000_000.0]
    s = streams([[]])  # headers, never a snapshot
    c = breakerd.Client(s.url, worker_id="w1", clock=lambda: now[0], watch_heartbeat=60)
    try:
        c.cache.observe({"breaker": "pinned", "state": "STATE_FORCED_OPEN", "deny_until_ms": FOREVER, "denial": FORCED})
        assert c.cache.denial("pinned", stale_ok=True) is not None
        now[0] += 60.001
        assert c.cache.denial("pinned", stale_ok=True) is None, "not heard for STALE_VIEW: no longer denies"
    finally:
        c.close()
