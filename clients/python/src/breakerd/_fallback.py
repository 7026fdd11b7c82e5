"""The minimal local breaker that answers while no daemon does.

It is the subset of breakerd's rules one worker can apply alone, held to
the Go client's fallback by conformance/fallback.json: consecutive
counted failures up to the breaker's threshold (from GetPolicy) open it
for the base cooldown; then one local probe goes out (its slot freed
after the probe timeout if it never reports), whose success closes the
circuit and whose failure opens it again for twice the last cooldown, at
most the cap. A success ends a failure run; an outcome that never counts
neither counts nor ends it. No quorum, window, slow calls or jitter.
Every answer it gives is degraded. Safe for concurrent use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from ._denial import data
from ._evidence import (
    KIND_CANCELLED,
    KIND_DENIAL,
    KIND_DNS,
    KIND_MALFORMED,
    KIND_REFUSED,
    KIND_RESET,
    KIND_TIMEOUT,
    KIND_TLS,
    Evidence,
)

ALLOWED = "DECISION_ALLOWED"
PROBE = "DECISION_PROBE"
DENIED_OPEN = "DECISION_DENIED_OPEN"
DENIED_PROBE = "DECISION_DENIED_PROBE_IN_FLIGHT"

# The outcomes the subset knows: counted failures, and those that never
# count (a success, which ends a run, is the remaining one).
_COUNTED = frozenset({"OUTCOME_TRANSPORT", "OUTCOME_TIMEOUT", "OUTCOME_SERVER_ERROR", "OUTCOME_MALFORMED_OUTPUT"})
_SUCCESS = "OUTCOME_SUCCESS"
# The error kinds it counts: the transport kinds, a timeout, malformed
# output (an unrecognised error counts only by a policy it does not have).
_COUNTED_KINDS = frozenset({KIND_DNS, KIND_TLS, KIND_REFUSED, KIND_RESET, KIND_TIMEOUT, KIND_MALFORMED})


# breakerd's default policy's values of LocalPolicy's fields
# (conformance/client_rules.json's defaults).
_DEFAULTS: dict[str, int] = {k: int(v) for k, v in data("client_rules.json")["defaults"].items()}


@dataclass(frozen=True)
class LocalPolicy:
    """LocalPolicy is what the fallback takes from a breaker's policy
    (GetPolicy's fields of the same names). The defaults are breakerd's
    (conformance/client_rules.json), for a breaker whose policy was never
    read."""

    threshold: int = _DEFAULTS["threshold"]
    cooldown_base_ms: int = _DEFAULTS["cooldown_base_ms"]
    cooldown_cap_ms: int = _DEFAULTS["cooldown_cap_ms"]
    probe_timeout_ms: int = _DEFAULTS["probe_timeout_ms"]


@dataclass
class _Local:
    failures: int = 0
    open_until_ms: int = 0  # 0: closed
    cooldown_ms: int = 0  # the open period in force
    probe_until_ms: int = 0  # the local probe's slot, held until then; 0: free
    generation: int = 0


@dataclass(frozen=True)
class LocalDecision:
    """LocalDecision is one answer of the local breaker; a denial holds
    until until_ms (the local clock)."""

    decision: str
    generation: int
    retry_after_ms: int = 0
    until_ms: int = 0

    @property
    def allowed(self) -> bool:
        return self.decision in (ALLOWED, PROBE)


def outcome_counts(outcome: str) -> bool | None:
    """outcome_counts is True for a counted failure, False for a success,
    None for an outcome the subset ignores."""
    if outcome in _COUNTED:
        return True
    return False if outcome == _SUCCESS else None


def counts(ev: Evidence) -> bool | None:
    """counts reads evidence the way the fallback may without breakerd's
    table (conformance/classification.json holds the full one; the suite
    holds this to client_rules.json's fallback_counts rows): a 5xx, a 408,
    a 429 that names no wait, or an error kind of transport, timeout or
    malformed output is a counted failure, no error a success, anything
    else (another 4xx, a cancel, a breakerd denial, an error the client
    could not name) ignored."""
    kind = ev.get("error_kind", "")
    status = int(ev.get("http_status", 0) or 0)
    if kind in (KIND_CANCELLED, KIND_DENIAL):
        return None
    if status >= 500 or status == 408 or status == 429 and not ev.get("headers"):
        return True  # a bare 429's wait is the daemon's default, past any deadline the fallback weighs
    if status >= 400:
        return None
    if kind:
        return True if kind in _COUNTED_KINDS else None
    grpc = ev.get("grpc_status")
    if grpc is not None and grpc != 0:
        return None  # gRPC codes vary; the subset does not judge them
    return False


class LocalBreaker:
    """LocalBreaker is the fallback's table of breakers. ``now_ms`` is the
    clock (ms since the epoch); tests inject their own."""

    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now = now_ms
        self._lock = threading.Lock()
        self._table: dict[str, _Local] = {}
        self._policy: dict[str, LocalPolicy] = {}

    def set_policy(self, breaker: str, policy: LocalPolicy) -> None:
        with self._lock:
            self._policy[breaker] = policy

    def has_policy(self, breaker: str) -> bool:
        with self._lock:
            return breaker in self._policy

    def allow(self, breaker: str) -> LocalDecision:
        with self._lock:
            b = self._table.setdefault(breaker, _Local())
            now = self._now()
            if b.open_until_ms == 0:
                return LocalDecision(ALLOWED, b.generation)
            if now < b.open_until_ms:
                return LocalDecision(DENIED_OPEN, b.generation, b.open_until_ms - now, b.open_until_ms)
            if now < b.probe_until_ms:
                return LocalDecision(DENIED_PROBE, b.generation, b.probe_until_ms - now, b.probe_until_ms)
            b.probe_until_ms = now + self._policy.get(breaker, LocalPolicy()).probe_timeout_ms
            return LocalDecision(PROBE, b.generation)

    def peek(self, breaker: str) -> LocalDecision | None:
        """peek returns the denial the local breaker would answer now, or
        None when it would let a call (or a probe) through; takes no
        probe slot."""
        with self._lock:
            b = self._table.get(breaker)
            now = self._now()
            if b is None or b.open_until_ms == 0:
                return None
            if now < b.open_until_ms:
                return LocalDecision(DENIED_OPEN, b.generation, b.open_until_ms - now, b.open_until_ms)
            if now < b.probe_until_ms:
                return LocalDecision(DENIED_PROBE, b.generation, b.probe_until_ms - now, b.probe_until_ms)
            return None

    def record(self, breaker: str, generation: int | None, probe: bool, counted: bool | None) -> None:
        """record applies one outcome (True: a counted failure, False: a
        success, None: ignored) of a call the local breaker admitted at
        generation (None: a call breakerd admitted, counted against the
        current one); probe says it was the local probe."""
        with self._lock:
            b = self._table.setdefault(breaker, _Local())
            pol = self._policy.get(breaker, LocalPolicy())
            if generation is not None and generation != b.generation:
                return  # stale: the circuit moved since the call was admitted
            if probe:
                if b.open_until_ms == 0 or b.probe_until_ms == 0:
                    return  # the slot lapsed and was handed on, or the circuit closed
                b.probe_until_ms = 0
                if counted is True:
                    self._open(b, min(2 * b.cooldown_ms, pol.cooldown_cap_ms))
                elif counted is False:
                    b.open_until_ms, b.cooldown_ms, b.failures = 0, 0, 0
                    b.generation += 1
                return
            if b.open_until_ms != 0 or counted is None:
                return
            if counted is False:
                b.failures = 0
                return
            b.failures += 1
            if b.failures >= pol.threshold:
                self._open(b, pol.cooldown_base_ms)

    def hold_open(self, breaker: str) -> None:
        """hold_open makes a closed breaker open with its probe due now
        (one call goes, the rest are denied until its outcome): the
        daemons last said it was open and none answers now."""
        with self._lock:
            b = self._table.setdefault(breaker, _Local())
            if b.open_until_ms == 0:
                self._open(b, self._policy.get(breaker, LocalPolicy()).cooldown_base_ms)
                b.open_until_ms = self._now()

    def reset(self) -> None:
        """reset forgets every local verdict: breakerd answers again."""
        with self._lock:
            self._table.clear()

    def _open(self, b: _Local, cooldown_ms: int) -> None:
        b.cooldown_ms = cooldown_ms
        b.open_until_ms = self._now() + cooldown_ms
        b.generation += 1
        b.failures = 0
