"""The minimal local breaker that answers while no daemon does.

It is the subset of breakerd's rules that one worker can apply alone
(conformance/ holds it to the Go client's fallback): consecutive counted
failures up to the breaker's threshold (from GetPolicy) open it for one
base cooldown; then one local probe goes out, whose success closes it
and whose failure opens it for one base cooldown again. No quorum, no
window, no slow calls, no jitter, no backoff. Every answer it gives is
degraded. Safe for concurrent use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from ._evidence import KIND_CANCELLED, KIND_DENIAL, Evidence

# The defaults of breakerd's policy, used for a breaker whose policy the
# client never read (docs/policies.md).
DEFAULT_THRESHOLD = 5
DEFAULT_COOLDOWN_MS = 30_000

ALLOWED = "DECISION_ALLOWED"
PROBE = "DECISION_PROBE"
DENIED_OPEN = "DECISION_DENIED_OPEN"
DENIED_PROBE = "DECISION_DENIED_PROBE_IN_FLIGHT"


@dataclass(frozen=True)
class LocalPolicy:
    """LocalPolicy is what the fallback takes from a breaker's policy."""

    threshold: int = DEFAULT_THRESHOLD
    cooldown_ms: int = DEFAULT_COOLDOWN_MS


@dataclass
class _Local:
    failures: int = 0
    open_until_ms: int = 0  # 0: closed
    probe_out: bool = False
    generation: int = 0
    reason: str = ""


@dataclass(frozen=True)
class LocalDecision:
    """LocalDecision is one answer of the local breaker."""

    decision: str
    generation: int
    retry_after_ms: int = 0
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.decision in (ALLOWED, PROBE)


def counts(ev: Evidence) -> bool | None:
    """counts reads evidence the way the fallback may without breakerd's
    table: True for a failure any policy counts (a 5xx, an error kind of
    transport, timeout or malformed output), False for a success (no
    evidence, or a 2xx/3xx), None for everything else (4xx, cancels,
    denials), which the fallback ignores."""
    kind = ev.get("error_kind", "")
    status = ev.get("http_status", 0)
    if kind in (KIND_CANCELLED, KIND_DENIAL):
        return None
    if kind:
        return True
    if not status:
        return False if "grpc_status" not in ev else (None if ev["grpc_status"] else False)
    if status >= 500:
        return True
    return False if status < 400 else None


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
                return LocalDecision(DENIED_OPEN, b.generation, b.open_until_ms - now, b.reason)
            if b.probe_out:
                return LocalDecision(DENIED_PROBE, b.generation, 0, b.reason)
            b.probe_out = True
            return LocalDecision(PROBE, b.generation)

    def peek(self, breaker: str) -> LocalDecision | None:
        """peek returns the denial the local breaker would answer now, or
        None when it would allow (a due probe included); takes nothing."""
        with self._lock:
            b = self._table.get(breaker)
            now = self._now()
            if b is None or b.open_until_ms == 0 or now >= b.open_until_ms:
                return None
            return LocalDecision(DENIED_OPEN, b.generation, b.open_until_ms - now, b.reason)

    def record(self, breaker: str, generation: int | None, probe: bool, counted: bool | None) -> None:
        """record applies one outcome (see counts) of a call the local
        breaker admitted at generation (None: a call breakerd admitted,
        counted against the current one); probe says it was the probe."""
        with self._lock:
            b = self._table.setdefault(breaker, _Local())
            pol = self._policy.get(breaker, LocalPolicy())
            if probe and generation == b.generation and b.probe_out:
                b.probe_out = False
                if counted is True:
                    self._open(b, pol, "the local probe failed")
                elif counted is False:
                    self._close(b)
                return
            if generation is not None and generation != b.generation:
                return  # stale: the circuit moved since the call was admitted
            if counted is False and b.open_until_ms == 0:
                b.failures = 0
            elif counted is True and b.open_until_ms == 0:
                b.failures += 1
                if b.failures >= pol.threshold:
                    self._open(b, pol, f"{b.failures} consecutive failures seen by this worker")

    def reset(self) -> None:
        """reset forgets every local verdict: breakerd answers again."""
        with self._lock:
            self._table.clear()

    def _open(self, b: _Local, pol: LocalPolicy, why: str) -> None:
        b.open_until_ms = self._now() + pol.cooldown_ms
        b.generation += 1
        b.reason = why
        b.failures = 0

    def _close(self, b: _Local) -> None:
        b.open_until_ms = 0
        b.generation += 1
        b.failures = 0
        b.reason = ""
