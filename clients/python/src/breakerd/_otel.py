"""OpenTelemetry, when its API is installed (docs/observability.md): the
caller's W3C trace context goes to breakerd with each request, and a
guarded call's decision and outcome are recorded on the active span.
Without the API nothing is imported and each hook costs one check."""

from __future__ import annotations

import contextvars
from typing import Any, Callable, TypeVar

R = TypeVar("R")

_trace: Any
_propagate: Any
try:
    from opentelemetry import propagate as _propagate, trace as _trace
except ImportError:  # not installed: every hook is a no-op
    _trace = _propagate = None


def carry(fn: Callable[..., R]) -> Callable[..., R]:
    """carry returns fn run in the caller's context (its active span) when
    OpenTelemetry is installed: for a call handed to another thread."""
    if _trace is None:
        return fn
    ctx = contextvars.copy_context()
    return lambda *a, **kw: ctx.run(fn, *a, **kw)


def inject(headers: dict[str, str]) -> None:
    """inject adds the active trace context (traceparent) to headers
    through the API's propagator."""
    if _propagate is not None:
        _propagate.inject(headers)


def _span() -> Any:
    if _trace is None:
        return None
    span = _trace.get_current_span()
    return span if span.is_recording() else None


def _word(v: str, prefix: str) -> str:
    return v.removeprefix(prefix).lower()


def decision(p: Any) -> None:
    """decision records an Allow's answer, a Permit, on the active span:
    degraded is the local fallback's (breakerd not reached), apart from
    breakerd answering from its own memory (daemon_degraded)."""
    span = _span()
    if span is None:
        return
    span.set_attributes({"breakerd.breaker": p.breaker, "breakerd.decision": _word(p.decision, "DECISION_"),
                         "breakerd.degraded": p.degraded and not p.daemon_degraded,
                         "breakerd.daemon_degraded": p.daemon_degraded, "breakerd.cached": p.cached})
    denial = p.verdict
    if denial is not None:
        span.set_attributes({"breakerd.denial.status": denial.status,
                             "breakerd.denial.scope": _word(denial.scope, "DENIAL_SCOPE_"),
                             "breakerd.deny_until_ms": denial.deny_until_ms})


def outcome(classified_as: str, counted: bool) -> None:
    """outcome records a Record's outcome, and whether it counted, on the
    active span."""
    span = _span()
    if span is not None:
        span.set_attributes({"breakerd.outcome": _word(classified_as, "OUTCOME_"), "breakerd.outcome.counted": counted})


def tool_removed(tool: str, breaker: str, status: str, degraded: bool) -> None:
    """tool_removed is a tool a run removed, as an event on the active
    span."""
    span = _span()
    if span is not None:
        span.add_event("breakerd.tool_removed", {"breakerd.tool": tool, "breakerd.breaker": breaker,
                                                 "breakerd.denial.status": status, "breakerd.degraded": degraded})
