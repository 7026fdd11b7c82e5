"""OpenTelemetry against a real daemon: with the API installed, a guarded
call's decision and outcome land on the active span (in-memory exporter),
its traceparent reaches the daemon (the open event carries the tripping
call's trace id), and a tool a run removes is an event on the run's span;
without the API, breakerd imports nothing of it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import opentelemetry.trace
import pytest

import breakerd
import breakerd._otel

from .conftest import Daemon
from .traced import ended as every, exporter  # noqa: F401 (a fixture)


def client(d: Daemon, worker: str) -> breakerd.Client:
    return breakerd.Client(d.url, worker_id=worker, allow_budget=5.0, watch=False)


def fail(c: breakerd.Client, breaker: str) -> dict[str, Any]:
    p = c.allow(breaker)
    assert p.allowed
    return c.record(p, outcome="OUTCOME_SERVER_ERROR")


def ended(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    spans = [s for s in exporter.get_finished_spans() if s.name == name]
    assert spans, f"no span {name!r} ended"
    return spans[-1]


def test_decision_outcome_and_trace_id(daemon: Daemon, name: Callable[[str], str]) -> None:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tp.get_tracer("agent")
    b = name("payments")
    w1, w2 = client(daemon, "w1"), client(daemon, "w2")
    fail(w1, b)
    fail(w2, b)
    with tracer.start_as_current_span("execute_tool refund_charge") as tripping:
        fail(w1, b)  # the third failure from two workers: the trip
    attrs = ended(exporter, "execute_tool refund_charge").attributes or {}
    assert attrs["breakerd.breaker"] == b and attrs["breakerd.decision"] == "allowed"
    assert attrs["breakerd.outcome"] == "server_error" and attrs["breakerd.outcome.counted"] is True

    # The daemon read the traceparent: the open event carries the trace id.
    events = w1.call("Events", {"breaker": b}).get("events", [])
    opened = [e for e in events if e.get("to") == "STATE_OPEN" and e.get("kind") == "EVENT_KIND_TRANSITION"]
    assert opened and opened[-1].get("trace_id") == format(tripping.get_span_context().trace_id, "032x")

    with tracer.start_as_current_span("invoke_agent"):
        assert not w1.allow(b).allowed
        run = breakerd.Run(w1, {"refund_charge": b})
        assert run.available([{"name": "refund_charge"}]) == []
    span = ended(exporter, "invoke_agent")
    attrs = span.attributes or {}
    assert attrs["breakerd.decision"] == "denied_open" and attrs["breakerd.denial.status"] == "circuit_open"
    assert attrs["breakerd.denial.scope"] == "breaker" and int(str(attrs["breakerd.deny_until_ms"])) > 0
    removed = [e for e in span.events if e.name == "breakerd.tool_removed"]
    assert len(removed) == 1 and (removed[0].attributes or {})["breakerd.tool"] == "refund_charge"


def test_async_client_records_on_the_active_span(daemon: Daemon, name: Callable[[str], str]) -> None:
    """AsyncClient.allow and record mark the active span as Client's do,
    and its traceparent reaches the daemon (the open event's trace id)."""
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tp.get_tracer("agent")
    b = name("payments")
    w1 = client(daemon, "w1")
    fail(w1, b)
    fail(client(daemon, "w2"), b)

    async def trip() -> str:
        ac = breakerd.AsyncClient(daemon.url, worker_id="w1", allow_budget=5.0, watch=False)
        try:
            with tracer.start_as_current_span("execute_tool refund_charge") as span:
                p = await ac.allow(b)
                await ac.record(p, outcome="OUTCOME_SERVER_ERROR")
            with tracer.start_as_current_span("execute_tool again"):
                assert not (await ac.allow(b)).allowed  # breakerd's denial
            return format(span.get_span_context().trace_id, "032x")
        finally:
            await ac.close()

    trace_id = asyncio.run(trip())
    attrs = ended(exporter, "execute_tool refund_charge").attributes or {}
    assert attrs["breakerd.decision"] == "allowed" and attrs["breakerd.cached"] is False
    assert attrs["breakerd.daemon_degraded"] is False and attrs["breakerd.degraded"] is False
    assert attrs["breakerd.outcome"] == "server_error" and attrs["breakerd.outcome.counted"] is True
    again = ended(exporter, "execute_tool again").attributes or {}
    assert again["breakerd.decision"] == "denied_open" and again["breakerd.denial.status"] == "circuit_open"
    events = w1.call("Events", {"breaker": b}).get("events", [])
    opened = [e for e in events if e.get("to") == "STATE_OPEN" and e.get("kind") == "EVENT_KIND_TRANSITION"]
    assert opened and opened[-1].get("trace_id") == trace_id


def test_daemon_degraded_is_not_the_fallback(daemon: Daemon) -> None:
    """An answer breakerd gave from its own memory is daemon_degraded on
    the span, not degraded (the local fallback's), and one the client gave
    itself is cached, as the Go client has them."""
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    c = client(daemon, "w1")
    p = c._permit("b", "", {"decision": "DECISION_ALLOWED", "degraded": True})
    with tp.get_tracer("agent").start_as_current_span("execute_tool t"):
        breakerd._otel.decision(p)
    attrs = ended(exporter, "execute_tool t").attributes or {}
    assert attrs["breakerd.daemon_degraded"] is True and attrs["breakerd.degraded"] is False
    assert attrs["breakerd.cached"] is False
    with tp.get_tracer("agent").start_as_current_span("execute_tool fast"):
        breakerd._otel.decision(breakerd.Permit(breaker="b", decision="DECISION_ALLOWED", fast=True, cached=True))
    assert (ended(exporter, "execute_tool fast").attributes or {})["breakerd.cached"] is True


def test_a_guard_without_a_span_starts_its_own(daemon: Daemon, exporter: InMemorySpanExporter,
                                               name: Callable[[str], str]) -> None:
    """With a TracerProvider and no span recording, each guarded call is
    a tool span of its own ("execute_tool <tool>", the breaker's name
    without a tool), active while breakerd is asked and the call runs,
    ended with it: the decision, the outcome and the traceparent sent
    (the open event's trace id) are its."""
    b = name("payments")
    c = client(daemon, "w1")
    with c.guard(b, tool="refund_charge") as p:
        assert p.allowed
    fail(client(daemon, "w2"), b)
    fail(client(daemon, "w2"), b)
    with pytest.raises(breakerd.HttpError):
        with c.guard(b):
            raise breakerd.HttpError(503)  # the third failure: the trip
    ok, tripping = every(exporter, "execute_tool refund_charge"), every(exporter, "execute_tool " + b)
    assert len(exporter.get_finished_spans()) == 2 and len(ok) == len(tripping) == 1
    attrs = ok[0].attributes or {}
    assert attrs["gen_ai.operation.name"] == "execute_tool" and attrs["gen_ai.tool.name"] == "refund_charge"
    assert attrs["breakerd.decision"] == "allowed" and attrs["breakerd.outcome"] == "success"
    assert (tripping[0].attributes or {})["breakerd.outcome.counted"] is True
    assert ok[0].parent is None and not opentelemetry.trace.get_current_span().is_recording()  # ended, detached
    events = c.call("Events", {"breaker": b}).get("events", [])
    opened = [e for e in events if e.get("to") == "STATE_OPEN" and e.get("kind") == "EVENT_KIND_TRANSITION"]
    assert opened and opened[-1].get("trace_id") == format(tripping[0].context.trace_id, "032x")


def test_a_guard_marks_the_span_it_runs_in(daemon: Daemon, exporter: InMemorySpanExporter,
                                           name: Callable[[str], str]) -> None:
    """Inside a recording span (the framework's tool span) a guard starts
    none: it marks that one."""
    c = client(daemon, "w1")
    tracer = opentelemetry.trace.get_tracer("framework")
    with tracer.start_as_current_span("execute_tool search"):
        with c.guard(name("search"), tool="search"):
            pass
    (only,) = exporter.get_finished_spans()
    assert only.name == "execute_tool search" and (only.attributes or {})["breakerd.decision"] == "allowed"
    assert "gen_ai.tool.name" not in (only.attributes or {})  # the framework's span, as the framework made it


def test_an_async_guard_records_an_answer_given_in_process(exporter: InMemorySpanExporter) -> None:
    """async with guard: an answer the client gives with no round trip
    (here the local fallback's, no daemon answering) is on the tool span
    too."""
    c = breakerd.Client("http://127.0.0.1:1", worker_id="w1", watch=False)  # refused at once
    try:
        assert c.allow("b").degraded  # no daemon answers: the fallback answers from now on
        exporter.clear()

        async def guarded() -> None:
            async with c.guard("b", tool="refund_charge") as p:
                assert p.degraded

        asyncio.run(guarded())
    finally:
        c.close()
    (span,) = every(exporter, "execute_tool refund_charge")
    attrs = span.attributes or {}
    assert attrs["breakerd.decision"] == "allowed" and attrs["breakerd.degraded"] is True


def test_a_tool_the_run_lost_is_denied_on_its_span(daemon: Daemon, exporter: InMemorySpanExporter,
                                                   name: Callable[[str], str]) -> None:
    """A call to a tool the run already lost, denied with no round trip,
    is a tool span with the denial the run holds."""
    b = name("payments")
    c = client(daemon, "w1")
    fail(c, b)
    fail(client(daemon, "w2"), b)
    fail(c, b)
    run = breakerd.Run(c, {"refund_charge": b})
    assert run.available([{"name": "refund_charge"}]) == []  # the run loses it
    exporter.clear()
    with pytest.raises(breakerd.CircuitOpen):
        with run.guard("refund_charge"):
            raise AssertionError("a denied call ran")
    (span,) = every(exporter, "execute_tool refund_charge")
    attrs = span.attributes or {}
    assert attrs["breakerd.decision"] == "denied_open" and attrs["breakerd.denial.status"] == "circuit_open"
    assert attrs["breakerd.cached"] is True and int(str(attrs["breakerd.deny_until_ms"])) > 0


def test_no_span_without_a_tracer_provider() -> None:
    """With the API but no SDK's provider, a guard starts nothing."""
    assert breakerd._otel.start_tool("t") is None


BLOCKED = """
import sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(name)
        return None
sys.meta_path.insert(0, Blocker())
import breakerd, breakerd._otel as o
h = {}
o.inject(h)
o.decision(breakerd.Permit(breaker="b", decision="DECISION_ALLOWED"))
o.outcome("OUTCOME_SUCCESS", True)
o.tool_removed("t", "b", "circuit_open", False)
started = o.start_tool("t")
o.end_tool(started)
assert h == {} and started is None, (h, started)
loaded = [m for m in sys.modules if m.startswith("opentelemetry")]
assert not loaded, loaded
print("ok")
"""


def test_nothing_imported_without_opentelemetry() -> None:
    out = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
