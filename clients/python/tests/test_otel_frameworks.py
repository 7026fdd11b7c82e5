"""The trace of a denied tool call inside a real framework run (the
OpenAI Agents SDK and LangChain v1's create_agent on LangGraph, pinned in
requirements-test.txt, each with its own scripted model): neither gives
OpenTelemetry a tool span, so the guard starts its own, "execute_tool
<tool>" (GenAI conventions), and marks it with the denial; the daemon,
exporting over OTLP to otlpsink, puts its Allow under it in the same
trace (docs/observability.md, "One trace")."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import agents
import pytest
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from breakerd.adapters.langchain import BreakerdMiddleware
from breakerd.adapters.openai_agents import Toolbox

from .conftest import Daemon
from .test_adapters import Vendor, client
from .test_adapters_langchain import ScriptedChat, call, tools_of, trip
from .traced import Sink, daemon_allow_under, ended, exporter, sink, traced_daemon  # noqa: F401 (fixtures)


@pytest.fixture(autouse=True)
def no_agents_tracing() -> None:
    agents.set_tracing_disabled(True)  # the SDK's own traces go to OpenAI's backend


def denied_tool_span(exp: InMemorySpanExporter, tool: str) -> ReadableSpan:
    """The one tool span of tool, which carries breakerd's denial."""
    spans = ended(exp, "execute_tool " + tool)
    assert len(spans) == 1, [s.name for s in exp.get_finished_spans()]
    span = spans[0]
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.operation.name"] == "execute_tool" and attrs["gen_ai.tool.name"] == tool
    assert attrs["breakerd.decision"] == "denied_open" and attrs["breakerd.denial.status"] == "circuit_open"
    assert attrs["breakerd.degraded"] is False and attrs["breakerd.cached"] is False
    assert "breakerd.outcome" not in attrs  # denied: nothing ran, nothing recorded
    assert span.instrumentation_scope is not None and span.instrumentation_scope.schema_url.endswith("/1.40.0")
    return span


async def test_openai_agents_denied_tool_call(traced_daemon: Daemon, sink: Sink, exporter: InMemorySpanExporter,
                                              name: Callable[[str], str]) -> None:
    """The circuit opens while the model thinks, after the turn's tools
    were judged: the model's refund_charge goes to breakerd and is denied
    there."""
    vendor = Vendor()
    b = name("payments")
    box = Toolbox(client(traced_daemon, "w3"), {"refund_charge": b})

    @box.function_tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return vendor.refund(charge_id)

    def trip_then_call(_: Any) -> Any:
        trip(traced_daemon, b, Vendor())
        return [function_call("refund_charge", {"charge_id": "ch_1"}, call_id="c1")]

    model = ScriptedModel([ModelStep.respond(trip_then_call), [assistant_message("Payments is out of service.")]])
    agent = agents.Agent(name="support", instructions="Help the customer.", tools=[refund_charge], model=model)
    await box.run(agent, "Refund charge ch_1")
    out = next(i for i in model.calls[-1].input if isinstance(i, dict) and i.get("type") == "function_call_output")
    assert json.loads(out["output"])["status"] == "circuit_open" and vendor.calls == 0

    daemon_allow_under(sink, denied_tool_span(exporter, "refund_charge"))


class TrippingChat(ScriptedChat):
    """ScriptedChat whose first answer opens the circuit while it is
    written, after the turn's tools were judged."""

    tripping: Callable[[], None] = lambda: None

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        trip_now, self.tripping = self.tripping, lambda: None
        trip_now()
        return super()._generate(messages, *args, **kwargs)


def test_langchain_agent_denied_tool_call(traced_daemon: Daemon, sink: Sink, exporter: InMemorySpanExporter,
                                          name: Callable[[str], str]) -> None:
    vendor = Vendor()
    b = name("payments")
    model = TrippingChat(messages=iter([call("refund_charge", charge_id="ch_1"), AIMessage("Payments is down.")]),
                         calls=[], tripping=lambda: trip(traced_daemon, b, Vendor()))
    agent = create_agent(model, tools_of(vendor),
                         middleware=[BreakerdMiddleware(client(traced_daemon, "w3"), {"refund_charge": b})])
    out = agent.invoke({"messages": [("user", "Refund charge ch_1")]})["messages"]
    assert json.loads(str(out[-2].content))["status"] == "circuit_open" and vendor.calls == 0

    daemon_allow_under(sink, denied_tool_span(exporter, "refund_charge"))
