"""Fixtures for traces: the application's TracerProvider (an SDK one
exporting to memory, the API's global for one test) and a daemon
exporting over OTLP to otlpsink (internal/tests/otlptest/otlpsink), whose
spans the test reads back as JSON. Import the fixtures a test uses."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .conftest import REPO, Daemon

# How long the daemon may take to export a span it ended: its batch goes
# every OTEL_BSP_SCHEDULE_DELAY ms; the bound is for a loaded machine.
EXPORTED_WITHIN = 60.0


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """The application's TracerProvider for one test, exporting to memory.
    The API takes its global once a process (set_tracer_provider), so the
    test puts it in the API's slot and monkeypatch takes it back."""
    exp = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exp))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", tp)
    return exp


def ended(exp: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The spans named name that have ended, in order."""
    return [s for s in exp.get_finished_spans() if s.name == name]


class Sink:
    """Sink is a running otlpsink: ``endpoint`` is what
    OTEL_EXPORTER_OTLP_ENDPOINT names it by."""

    def __init__(self, binary: Path) -> None:
        self.proc = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.endpoint = self.proc.stdout.readline().decode().strip()
        if not self.endpoint.startswith("http://"):
            self.close()
            raise RuntimeError(f"otlpsink printed {self.endpoint!r}, not its endpoint")

    def spans(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.endpoint + "/spans", timeout=10) as r:
            got: list[dict[str, Any]] = json.load(r)
            return got

    def wait(self, what: str, holds: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """wait returns the first span received that holds is true of,
        waiting for the daemon's export up to EXPORTED_WITHIN."""
        until = time.monotonic() + EXPORTED_WITHIN
        while True:
            spans = self.spans()
            found = [s for s in spans if holds(s)]
            if found:
                return found[0]
            if time.monotonic() > until:
                raise AssertionError(f"no {what} received within {EXPORTED_WITHIN} s; received: {spans}")
            time.sleep(0.05)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # otlpsink exits when its stdin closes
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def sink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sink]:
    """otlpsink built from this repository, for the session."""
    binary = tmp_path_factory.mktemp("otlpsink") / "otlpsink"
    subprocess.run(["go", "build", "-o", str(binary), "./internal/tests/otlptest/otlpsink"], cwd=REPO, check=True)
    s = Sink(binary)
    yield s
    s.close()


@pytest.fixture
def traced_daemon(daemons: Callable[..., Daemon], sink: Sink) -> Daemon:
    """A daemon exporting its spans to the sink (docs/observability.md,
    "The daemon"), its batches every 50 ms."""
    return daemons(env={"OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                        "OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_TRACES_SAMPLER": "parentbased_always_on"})


def hex_id(n: int, width: int) -> str:
    return format(n, f"0{width}x")


def daemon_allow_under(sink: Sink, span: ReadableSpan) -> dict[str, Any]:
    """The daemon's span for an Allow sent inside span, its child in the
    same trace (over HTTP/JSON: otelhttp's, docs/observability.md), once
    exported; the RPC's span is under it, and the Allow script's under
    that."""
    ctx = span.get_span_context()
    trace_id, span_id = hex_id(ctx.trace_id, 32), hex_id(ctx.span_id, 16)
    front = sink.wait("daemon Allow span under " + span.name, lambda s: s["trace_id"] == trace_id and
                      s["name"] == "POST /breakerd.v1.BreakerService/Allow")
    assert front["service"] == "breakerd" and front["parent_span_id"] == span_id, front
    rpc = sink.wait("the Allow RPC's span", lambda s: s["trace_id"] == trace_id and
                    s["name"] == "breakerd.v1.BreakerService/Allow")
    assert rpc["parent_span_id"] == front["span_id"], rpc
    script = sink.wait("the Allow script's span", lambda s: s["trace_id"] == trace_id and s["name"] == "EVALSHA allow")
    assert script["parent_span_id"] == rpc["span_id"], script
    assert script["attributes"].get("db.stored_procedure.name") == "allow", script
    return rpc
