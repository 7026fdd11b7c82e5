"""The local fallback on a virtual clock: consecutive failures up to the
threshold, one base cooldown, one local probe."""

from __future__ import annotations

from breakerd._fallback import (
    ALLOWED,
    DENIED_OPEN,
    DENIED_PROBE,
    PROBE,
    LocalBreaker,
    LocalPolicy,
    counts,
)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


def tripped(threshold: int = 3, cooldown: int = 10_000) -> tuple[LocalBreaker, Clock]:
    clock = Clock()
    lb = LocalBreaker(clock)
    lb.set_policy("b", LocalPolicy(threshold=threshold, cooldown_ms=cooldown))
    for _ in range(threshold):
        d = lb.allow("b")
        assert d.decision == ALLOWED
        lb.record("b", d.generation, False, True)
    return lb, clock


def test_trips_at_threshold() -> None:
    clock = Clock()
    lb = LocalBreaker(clock)
    lb.set_policy("b", LocalPolicy(threshold=3, cooldown_ms=10_000))
    for i in range(2):
        lb.record("b", lb.allow("b").generation, False, True)
    # A success in between resets the run: two more failures do not trip.
    lb.record("b", lb.allow("b").generation, False, False)
    for i in range(2):
        lb.record("b", lb.allow("b").generation, False, True)
    assert lb.allow("b").decision == ALLOWED
    lb.record("b", lb.allow("b").generation, False, True)
    d = lb.allow("b")
    assert (d.decision, d.retry_after_ms) == (DENIED_OPEN, 10_000)


def test_ignored_outcomes_do_not_count() -> None:
    clock = Clock()
    lb = LocalBreaker(clock)
    lb.set_policy("b", LocalPolicy(threshold=1, cooldown_ms=10_000))
    for ev in ({"http_status": 404}, {"http_status": 429}, {"error_kind": "ERROR_KIND_CANCELLED"},
               {"error_kind": "ERROR_KIND_BREAKERD_DENIAL"}):
        lb.record("b", lb.allow("b").generation, False, counts(ev))
    assert lb.allow("b").decision == ALLOWED


def test_one_probe_after_the_cooldown() -> None:
    lb, clock = tripped()
    clock.ms += 9_999
    assert lb.allow("b").decision == DENIED_OPEN
    clock.ms += 1
    p = lb.allow("b")
    assert p.decision == PROBE
    assert lb.allow("b").decision == DENIED_PROBE
    lb.record("b", p.generation, True, False)
    assert lb.allow("b").decision == ALLOWED


def test_failed_probe_opens_for_one_base_cooldown() -> None:
    lb, clock = tripped(cooldown=10_000)
    clock.ms += 10_000
    p = lb.allow("b")
    lb.record("b", p.generation, True, True)
    d = lb.allow("b")
    assert (d.decision, d.retry_after_ms) == (DENIED_OPEN, 10_000)  # no backoff


def test_cancelled_probe_frees_the_slot() -> None:
    lb, clock = tripped()
    clock.ms += 10_000
    p = lb.allow("b")
    lb.record("b", p.generation, True, None)
    assert lb.allow("b").decision == PROBE


def test_stale_record_is_ignored() -> None:
    lb, clock = tripped(threshold=2)
    clock.ms += 10_000
    lb.record("b", lb.allow("b").generation, True, False)  # closed again, a new generation
    lb.record("b", 0, False, True)  # from before the trip
    lb.record("b", 0, False, True)
    assert lb.allow("b").decision == ALLOWED


def test_counts() -> None:
    assert counts({}) is False
    assert counts({"http_status": 200}) is False
    assert counts({"http_status": 503}) is True
    assert counts({"http_status": 400}) is None
    assert counts({"error_kind": "ERROR_KIND_TIMEOUT"}) is True
    assert counts({"error_kind": "ERROR_KIND_CANCELLED"}) is None
