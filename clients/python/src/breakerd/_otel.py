"""OpenTelemetry, when its API is installed (docs/observability.md): the
caller's W3C trace context goes to breakerd with each request, and a
guarded call's decision and outcome are recorded on the active span, or
on a guard's own tool span when none is recording. Without the API
nothing is imported and each hook costs one check."""

from __future__ import annotations

import contextvars
from typing import Any, Callable, TypeVar

R = TypeVar("R")

_trace: Any
_propagate: Any
_context: Any
try:
    from opentelemetry import context as _context, propagate as _propagate, trace as _trace
except ImportError:  # not installed: every hook is a no-op
    _trace = _propagate = _context = None

# The GenAI conventions' version the tool span's names follow.
SCHEMA_URL = "https://opentelemetry.io/schemas/1.40.0"


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


def start_tool(name: str) -> Any:
    """start_tool starts a guarded call's own span, named as the GenAI
    conventions name a tool's execution ("execute_tool <name>"), and makes
    it the active one, when no span is recording and the application has
    a TracerProvider (the API's global); it returns what end_tool takes,
    None otherwise. A framework's (or its instrumentation's) span, when
    one is active, is marked instead."""
    if _trace is None or _trace.get_current_span().is_recording():
        return None
    tracer = _trace.get_tracer("breakerd", schema_url=SCHEMA_URL)
    span = tracer.start_span("execute_tool " + name, kind=_trace.SpanKind.INTERNAL,
                             attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name})
    if not span.get_span_context().is_valid:  # no SDK: no trace to continue
        return None
    return span, _context.attach(_trace.set_span_in_context(span))


def end_tool(started: Any) -> None:
    """end_tool ends a span start_tool started, and makes the span active
    before it the active one again."""
    if started is not None:
        span, token = started
        _context.detach(token)
        span.end()
