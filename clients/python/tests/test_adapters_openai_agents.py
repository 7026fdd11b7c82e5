"""The Agents SDK adapter inside the SDK (pinned in requirements-test.txt)
with its own ScriptedModel: a tool lost in the middle of an agent run
leaves the next turn's tool list with a notice, in Runner.run, run_sync
and run_streamed, for the agents handed off to and for MCP servers' tools.
The vendor counts its calls: the wire is the witness."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import agents
import mcp.types
import pytest
from agents.mcp import MCPServer
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from breakerd import _render
from breakerd.adapters.openai_agents import Toolbox

from .conftest import Daemon
from .test_adapters import Vendor, client
from .test_adapters_langchain import trip


@pytest.fixture(autouse=True)
def no_tracing() -> None:
    agents.set_tracing_disabled(True)


def toolbox(d: Daemon, b: str, vendor: Vendor, worker: str = "w3") -> tuple[Toolbox, list[Any]]:
    """refund_charge on b; web_search trips b while it runs (the circuit
    opens in the middle of the agent run)."""
    box = Toolbox(client(d, worker), {"refund_charge": b})

    @box.function_tool
    def web_search(query: str) -> str:
        """Search the web."""
        trip(d, b, Vendor())
        return "results for " + query

    @box.function_tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return vendor.refund(charge_id)

    return box, [web_search, refund_charge]


def mid_run_script() -> ScriptedModel:
    return ScriptedModel([[function_call("web_search", {"query": "refunds"}, call_id="c1")],
                          [assistant_message("Payments is out of service.")]])


def assert_lost_mid_run(model: ScriptedModel) -> None:
    first, second = model.calls
    assert [t.name for t in first.tools] == ["web_search", "refund_charge"]
    assert first.system_instructions == "Help the customer."
    assert [t.name for t in second.tools] == ["web_search"]
    assert second.system_instructions is not None
    assert second.system_instructions.startswith("Help the customer.\n\nSome tools are out of service")
    assert "- refund_charge: " in second.system_instructions


def agent_of(model: ScriptedModel, tools: list[Any], **kw: Any) -> agents.Agent[Any]:
    return agents.Agent(name="support", instructions="Help the customer.", tools=tools, model=model, **kw)


async def test_tool_lost_mid_run(daemon: Daemon, name: Callable[[str], str]) -> None:
    vendor = Vendor()
    box, tools = toolbox(daemon, name("payments"), vendor)
    model = mid_run_script()
    await box.run(agent_of(model, tools), "Refund charge ch_1")
    assert_lost_mid_run(model)
    assert vendor.calls == 0


def test_tool_lost_mid_run_sync(daemon: Daemon, name: Callable[[str], str]) -> None:
    box, tools = toolbox(daemon, name("payments"), Vendor())
    model = mid_run_script()
    box.run_sync(agent_of(model, tools), "Refund charge ch_1")
    assert_lost_mid_run(model)


async def test_tool_lost_mid_run_streamed(daemon: Daemon, name: Callable[[str], str]) -> None:
    box, tools = toolbox(daemon, name("payments"), Vendor())
    model = mid_run_script()
    result = box.run_streamed(agent_of(model, tools), "Refund charge ch_1")
    async for _ in result.stream_events():
        pass
    assert result.final_output == "Payments is out of service."
    assert_lost_mid_run(model)


async def test_denial_met_mid_run_removes_the_tool(daemon: Daemon, name: Callable[[str], str]) -> None:
    """The circuit opens while the model thinks, after the turn's tools
    were judged: the model's call is denied (its output is the denial; the
    vendor is not called) and the next turn has lost the tool."""
    vendor = Vendor()
    b = name("payments")
    box, tools = toolbox(daemon, b, vendor)

    def trip_then_call(call: Any) -> Any:
        trip(daemon, b, Vendor())
        return [function_call("refund_charge", {"charge_id": "ch_1"}, call_id="c1")]

    model = ScriptedModel([ModelStep.respond(trip_then_call), [assistant_message("Payments is out of service.")]])
    await box.run(agent_of(model, tools), "Refund charge ch_1")
    first, last = model.calls
    assert [t.name for t in first.tools] == ["web_search", "refund_charge"]
    out = next(i for i in last.input if isinstance(i, dict) and i.get("type") == "function_call_output")
    assert json.loads(out["output"])["status"] == "circuit_open"
    assert [t.name for t in last.tools] == ["web_search"]
    assert last.system_instructions is not None and "- refund_charge: " in last.system_instructions
    assert vendor.calls == 0


async def test_handoff_agents_tools_are_judged(daemon: Daemon, name: Callable[[str], str]) -> None:
    """The agent handed off to loses the tool too, with the notice."""
    vendor = Vendor()
    b = name("payments")
    trip(daemon, b, vendor)
    box, (_, refund_charge) = toolbox(daemon, b, vendor)
    billing_model = ScriptedModel([[assistant_message("Refunds are out of service.")]])
    billing = agents.Agent(name="billing", instructions="Handle billing.", tools=[refund_charge], model=billing_model)
    triage_model = ScriptedModel([[function_call("transfer_to_billing", {}, call_id="h1")]])
    triage = agents.Agent(name="triage", instructions="Route.", handoffs=[billing], model=triage_model)
    result = await box.run(triage, "Refund charge ch_1")
    assert result.final_output == "Refunds are out of service."
    (call,) = billing_model.calls
    assert [t.name for t in call.tools] == []
    assert call.system_instructions is not None and "- refund_charge: " in call.system_instructions
    assert vendor.calls == 3


class FakeServer(MCPServer):
    """An in-process MCP server with one tool, lookup_order; counts calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    @property
    def name(self) -> str:
        return "orders"

    async def connect(self) -> None:
        pass

    async def cleanup(self) -> None:
        pass

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[mcp.types.Tool]:
        return [mcp.types.Tool(name="lookup_order", description="Look an order up.",
                               inputSchema={"type": "object", "properties": {"order": {"type": "string"}}})]

    async def call_tool(self, tool_name: str, arguments: dict[str, Any] | None,
                        meta: dict[str, Any] | None = None) -> mcp.types.CallToolResult:
        self.calls += 1
        raise ConnectionRefusedError("orders service refused the connection")

    async def list_prompts(self) -> Any:
        raise NotImplementedError

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError


async def test_mcp_server_tools_are_guarded_and_judged(daemon: Daemon, name: Callable[[str], str]) -> None:
    """An MCP server's tool call is guarded (its refusals are recorded and
    trip the breaker); then the tool leaves the next run's tool list."""
    b = name("orders")
    server = FakeServer()
    for i, worker in enumerate(("w1", "w2", "w1")):
        box = Toolbox(client(daemon, worker), {"lookup_order": b})
        model = ScriptedModel([[function_call("lookup_order", {"order": "o1"}, call_id=f"m{i}")],
                               [assistant_message("The lookup failed.")]])
        await box.run(agents.Agent(name="a", instructions="Help.", mcp_servers=[server], model=model), "Order o1?")
        assert [t.name for t in model.calls[0].tools] == ["lookup_order"]
    assert server.calls == 3

    box = Toolbox(client(daemon, "w3"), {"lookup_order": b})
    model = ScriptedModel([[assistant_message("Orders are out of service.")]])
    await box.run(agents.Agent(name="a", instructions="Help.", mcp_servers=[server], model=model), "Order o1?")
    (call,) = model.calls
    assert [t.name for t in call.tools] == []
    assert call.system_instructions is not None and "- lookup_order: " in call.system_instructions
    assert server.calls == 3


async def test_failure_text(daemon: Daemon, name: Callable[[str], str]) -> None:
    """A tool's failure reaches the model as breakerd's failure text, not
    the SDK's invitation to try again."""
    vendor = Vendor()
    box = Toolbox(client(daemon, "w1"), {"refund_charge": name("payments")})

    @box.function_tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return vendor.refund(charge_id)

    model = ScriptedModel([[function_call("refund_charge", {"charge_id": "ch_1"}, call_id="c1")],
                           [assistant_message("The refund failed.")]])
    await box.run(agent_of(model, [refund_charge]), "Refund charge ch_1")
    out = next(i for i in model.calls[-1].input if isinstance(i, dict) and i.get("type") == "function_call_output")
    assert out["output"] == _render.tool_failure("refund_charge")
    assert vendor.calls == 1


def plain_tools(vendor: Vendor) -> list[Any]:
    """The agent's tools as written without breakerd: agents.function_tool."""

    @agents.function_tool
    def web_search(query: str) -> str:
        """Search the web."""
        return "results for " + query

    @agents.function_tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return vendor.refund(charge_id)

    return [web_search, refund_charge]


async def test_plain_function_tools_are_guarded(daemon: Daemon, name: Callable[[str], str]) -> None:
    """box.run guards the agent's own function tools: each failure is
    recorded (three from two workers trip the breaker) and reaches the
    model as the failure text; the circuit opening while the model thinks
    denies its call (the vendor is not called); the next run has lost the
    tool."""
    vendor = Vendor()
    b = name("payments")
    for i, worker in enumerate(("w1", "w2")):
        model = ScriptedModel([[function_call("refund_charge", {"charge_id": "ch_1"}, call_id=f"c{i}")],
                               [assistant_message("The refund failed.")]])
        await Toolbox(client(daemon, worker), {"refund_charge": b}).run(agent_of(model, plain_tools(vendor)), "Refund")
        out = next(i for i in model.calls[-1].input if isinstance(i, dict) and i.get("type") == "function_call_output")
        assert out["output"] == _render.tool_failure("refund_charge")
    assert vendor.calls == 2
    (st,) = client(daemon, "w1").batch_get([b])
    assert int(st.get("failures", 0)) == 2

    def trip_then_call(call: Any) -> Any:
        with pytest.raises(Exception):
            with client(daemon, "w1").guard(b):
                Vendor().refund("ch_0")
        return [function_call("refund_charge", {"charge_id": "ch_1"}, call_id="c9")]

    model = ScriptedModel([ModelStep.respond(trip_then_call), [assistant_message("Payments is out of service.")]])
    await Toolbox(client(daemon, "w3"), {"refund_charge": b}).run(agent_of(model, plain_tools(vendor)), "Refund")
    first, last = model.calls
    assert [t.name for t in first.tools] == ["web_search", "refund_charge"]
    out = next(i for i in last.input if isinstance(i, dict) and i.get("type") == "function_call_output")
    assert json.loads(out["output"])["status"] == "circuit_open"
    assert [t.name for t in last.tools] == ["web_search"]
    assert vendor.calls == 2


async def test_plain_function_tool_success_is_recorded(daemon: Daemon, name: Callable[[str], str]) -> None:
    """A guarded call that succeeds is recorded: the failure before it no
    longer counts."""
    b = name("search")
    c = client(daemon, "w1")
    with pytest.raises(Exception):
        with c.guard(b):
            Vendor().refund("ch_0")
    assert int(c.batch_get([b])[0].get("failures", 0)) == 1
    model = ScriptedModel([[function_call("web_search", {"query": "q"}, call_id="s1")], [assistant_message("Done.")]])
    await Toolbox(client(daemon, "w2"), {"web_search": b}).run(agent_of(model, plain_tools(Vendor())), "Search")
    assert int(c.batch_get([b])[0].get("failures", 0)) == 0
