"""The local fallback beyond conformance/fallback.json (which
test_conformance runs): how evidence reaches it, stale records, a
cancelled probe."""

from __future__ import annotations

from breakerd._fallback import ALLOWED, DENIED_OPEN, PROBE, LocalBreaker, LocalPolicy, counts


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


def tripped(threshold: int = 2) -> tuple[LocalBreaker, Clock]:
    clock = Clock()
    lb = LocalBreaker(clock)
    lb.set_policy("b", LocalPolicy(threshold=threshold, cooldown_base_ms=10_000))
    for _ in range(threshold):
        lb.record("b", lb.allow("b").generation, False, True)
    assert lb.allow("b").decision == DENIED_OPEN
    return lb, clock


def test_counts() -> None:
    assert counts({}) is False
    assert counts({"http_status": 503}) is True
    assert counts({"http_status": 503, "error_kind": "ERROR_KIND_CANCELLED"}) is None
    assert counts({"http_status": 429}) is True  # no wait named: breakerd's bare wait outlasts the call
    assert counts({"http_status": 429, "headers": {"retry-after": "5"}}) is None
    assert counts({"http_status": 408}) is True
    assert counts({"http_status": 404}) is None
    assert counts({"error_kind": "ERROR_KIND_TIMEOUT"}) is True
    assert counts({"error_kind": "ERROR_KIND_MALFORMED_OUTPUT"}) is True
    assert counts({"error_kind": "ERROR_KIND_OTHER"}) is None  # unrecognised: the tool's own bug, maybe
    assert counts({"error_kind": "ERROR_KIND_BREAKERD_DENIAL"}) is None
    assert counts({"grpc_status": 0}) is False


def test_stale_record_is_ignored() -> None:
    lb, clock = tripped()
    clock.ms += 10_000
    lb.record("b", lb.allow("b").generation, True, False)  # the probe closes it
    lb.record("b", 0, False, True)  # from before the trip
    lb.record("b", 0, False, True)
    assert lb.allow("b").decision == ALLOWED


def test_cancelled_probe_frees_the_slot() -> None:
    lb, clock = tripped()
    clock.ms += 10_000
    p = lb.allow("b")
    assert p.decision == PROBE
    lb.record("b", p.generation, True, None)
    assert lb.allow("b").decision == PROBE


def test_peek_takes_nothing() -> None:
    lb, clock = tripped()
    assert lb.peek("b") is not None
    clock.ms += 10_000
    assert lb.peek("b") is None
    assert lb.allow("b").decision == PROBE
