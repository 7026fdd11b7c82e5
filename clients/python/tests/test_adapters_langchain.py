"""The LangChain adapter inside LangChain v1's create_agent and LangGraph
(pinned in requirements-test.txt), with a scripted chat model: no network,
no API key. The vendor counts its calls: the wire is the witness."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any

import httpx
import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool, tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode
from langgraph.types import Command

import breakerd
from breakerd import _render
from breakerd.adapters.langchain import AsyncToolkit, BreakerdMiddleware, Toolkit, failure_text

from .conftest import Daemon
from .proxy import Proxy
from .test_adapters import WORKERS, Vendor, client


def langchain_tools(vendor: Vendor) -> list[BaseTool]:
    """The two tools the LangChain tests give a model: web_search, and
    refund_charge, which calls vendor."""
    @tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return vendor.refund(charge_id)

    @tool
    def web_search(query: str) -> str:
        """Search the web."""
        return "results for " + query

    return [web_search, refund_charge]


class ScriptedChat(GenericFakeChatModel):
    """A chat model that answers from a script and keeps, for each call,
    the tool names it was bound with and the system message it read."""

    calls: list[tuple[list[str], str]] = []

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        self.calls.append(([breakerd.tool_name(t) for t in tools], ""))
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        system = next((str(m.content) for m in messages if isinstance(m, SystemMessage)), "")
        self.calls[-1] = (self.calls[-1][0], system)
        return super()._generate(messages, *args, **kwargs)


def scripted(*turns: AIMessage) -> ScriptedChat:
    return ScriptedChat(messages=iter(turns), calls=[])


def call(name: str, i: int | str = 0, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"{name}-{i}"}])


def tools_of(vendor: Vendor, on_search: Callable[[], None] = lambda: None) -> list[BaseTool]:
    @tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return vendor.refund(charge_id)

    @tool
    def web_search(query: str) -> str:
        """Search the web."""
        on_search()
        return "results for " + query

    return [web_search, refund_charge]


def trip(d: Daemon, breaker: str, vendor: Vendor) -> None:
    """Three failed calls from two workers: the test policy's trip."""
    for worker in WORKERS:
        with pytest.raises(httpx.HTTPStatusError):
            with client(d, worker).guard(breaker):
                vendor.refund("ch_0")


# -- create_agent with the middleware ---------------------------------------------------


def test_create_agent_middleware(daemon: Daemon, name: Callable[[str], str]) -> None:
    """Each failure reaches the model as the failure text and is recorded;
    after the trip the next agent run's model is bound without the tool
    and reads the notice in its system message."""
    vendor = Vendor()
    breakers = {"refund_charge": name("payments"), "web_search": name("search")}
    for i, worker in enumerate(WORKERS):
        model = scripted(call("refund_charge", i, charge_id="ch_1"), AIMessage("The refund failed."))
        agent = create_agent(model, tools_of(vendor), system_prompt="Help the customer.",
                             middleware=[BreakerdMiddleware(client(daemon, worker), breakers)])
        out = agent.invoke({"messages": [("user", "Refund charge ch_1")]})["messages"]
        # The third failure trips the breaker: that run's next model call
        # has lost the tool already.
        after = ["web_search"] if i == len(WORKERS) - 1 else ["web_search", "refund_charge"]
        assert [c[0] for c in model.calls] == [["web_search", "refund_charge"], after]
        failed = out[2]
        assert isinstance(failed, ToolMessage) and failed.status == "error"
        assert failed.content == _render.tool_failure("refund_charge")
    assert vendor.calls == 3

    model = scripted(AIMessage("Refunds are out of service."))
    agent = create_agent(model, tools_of(vendor), system_prompt="Help the customer.",
                         middleware=[BreakerdMiddleware(client(daemon, "w3"), breakers)])
    agent.invoke({"messages": [("user", "Refund charge ch_1")]})
    (bound, system), = model.calls
    assert bound == ["web_search"]
    assert system.startswith("Help the customer.\n\nSome tools are out of service")
    assert "- refund_charge: " in system and "issue_refund_manually" in system
    assert vendor.calls == 3


def test_create_agent_loses_a_tool_mid_run(daemon: Daemon, name: Callable[[str], str]) -> None:
    """The circuit opens between two model calls of one agent run (while
    web_search runs): the second call is bound without refund_charge and
    reads the notice; a call the model makes anyway is denied with the
    circuit_open JSON as its output, and the vendor is not called."""
    vendor = Vendor()
    b = name("payments")
    tools = tools_of(vendor, on_search=lambda: trip(daemon, b, Vendor()))
    model = scripted(call("web_search", query="refund policy"), call("refund_charge", charge_id="ch_1"),
                     AIMessage("Payments is down."))
    agent = create_agent(model, tools, middleware=[BreakerdMiddleware(client(daemon, "w3"), {"refund_charge": b})])
    out = agent.invoke({"messages": [("user", "Refund charge ch_1")]})["messages"]
    assert [c[0] for c in model.calls] == [["web_search", "refund_charge"], ["web_search"], ["web_search"]]
    assert model.calls[0][1] == ""
    assert "- refund_charge: " in model.calls[1][1]
    denied = out[-2]
    assert isinstance(denied, ToolMessage) and json.loads(str(denied.content))["status"] == "circuit_open"
    assert vendor.calls == 0


async def test_create_agent_async(daemon: Daemon, name: Callable[[str], str]) -> None:
    """ainvoke takes the middleware's async hooks: the same filtering."""
    vendor = Vendor()
    b = name("payments")
    trip(daemon, b, vendor)
    model = scripted(call("refund_charge", charge_id="ch_1"), AIMessage("Payments is down."))
    agent = create_agent(model, tools_of(vendor),
                         middleware=[BreakerdMiddleware(breakerd.AsyncClient(daemon.url, worker_id="w3", watch=False),
                                                        {"refund_charge": b})])
    out = (await agent.ainvoke({"messages": [("user", "Refund charge ch_1")]}))["messages"]
    assert model.calls[0][0] == ["web_search"] and "- refund_charge: " in model.calls[0][1]
    assert json.loads(str(out[2].content))["status"] == "circuit_open"
    assert vendor.calls == 3


def test_middleware_keeps_interrupts_and_plain_errors(daemon: Daemon, name: Callable[[str], str]) -> None:
    """handle_tool_errors=False leaves a tool's error to LangChain (the
    agent run ends with it), recorded all the same."""
    vendor = Vendor()
    b = name("payments")
    model = scripted(call("refund_charge", charge_id="ch_1"), AIMessage("unreached"))
    c = client(daemon, "w1")
    agent = create_agent(model, tools_of(vendor),
                         middleware=[BreakerdMiddleware(c, {"refund_charge": b}, handle_tool_errors=False)])
    with pytest.raises(httpx.HTTPStatusError):
        agent.invoke({"messages": [("user", "Refund charge ch_1")]})
    (st,) = c.batch_get([b])
    assert vendor.calls == 1 and int(st.get("failures", 0)) == 1


# -- Toolkit.wrap keeps the tool ------------------------------------------------------


def run_node(t: BaseTool, args: dict[str, Any], handle: Any = False) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode([t], handle_tool_errors=handle))
    graph.add_edge(START, "tools")
    msg = AIMessage("", tool_calls=[{"name": t.name, "args": args, "id": "tc-1"}])
    return graph.compile().invoke({"messages": [msg]})


def test_wrap_keeps_injected_tool_call_id(daemon: Daemon, name: Callable[[str], str]) -> None:
    @tool
    def transfer(to: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Hand the customer over."""
        return Command(update={"messages": [ToolMessage(f"handed to {to}", tool_call_id=tool_call_id)]})

    wrapped = Toolkit(client(daemon, "w1"), {"transfer": name("crm")}).wrap(transfer)
    out = run_node(wrapped, {"to": "billing"})["messages"][-1]
    assert isinstance(out, ToolMessage) and out.content == "handed to billing" and out.tool_call_id == "tc-1"
    assert wrapped.tool_call_schema.model_json_schema() == transfer.tool_call_schema.model_json_schema()


def test_wrap_keeps_injected_state(daemon: Daemon, name: Callable[[str], str]) -> None:
    @tool
    def count_messages(note: str, state: Annotated[dict[str, Any], InjectedState]) -> str:
        """Count the conversation's messages."""
        return f"{note}: {len(state['messages'])}"

    wrapped = Toolkit(client(daemon, "w1"), {"count_messages": name("local")}).wrap(count_messages)
    assert run_node(wrapped, {"note": "seen"})["messages"][-1].content == "seen: 1"


def test_middleware_client_from_the_environment(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BREAKERD_URL", daemon.url)
    mw = BreakerdMiddleware(breakers={"refund_charge": "payments"})
    assert [e.url for e in mw.kit.client.transport.endpoints] == [daemon.url]
    mw.kit.client.close()


def test_wrap_keeps_every_field(daemon: Daemon, name: Callable[[str], str]) -> None:
    @tool(return_direct=True, response_format="content_and_artifact")
    def lookup(order: str) -> tuple[str, dict[str, Any]]:
        """Look an order up."""
        return f"order {order}", {"id": order, "rows": [1, 2]}

    kit = Toolkit(client(daemon, "w1"), {"lookup": name("orders")})
    wrapped = kit.wrap(lookup)
    assert isinstance(wrapped, StructuredTool)
    for field in type(lookup).model_fields:
        if field not in ("func", "coroutine"):
            assert getattr(wrapped, field) == getattr(lookup, field), field
    msg = wrapped.invoke({"type": "tool_call", "name": "lookup", "args": {"order": "o1"}, "id": "tc-2"})
    assert isinstance(msg, ToolMessage)
    assert msg.content == "order o1" and msg.artifact == {"id": "o1", "rows": [1, 2]}
    assert lookup.invoke({"order": "o2"}) == "order o2"  # the original is untouched


def test_wrap_denial_keeps_the_tool_shape(daemon: Daemon, name: Callable[[str], str]) -> None:
    """A denied content_and_artifact tool answers the denial as content."""
    b = name("orders")
    trip(daemon, b, Vendor())

    @tool(response_format="content_and_artifact")
    def lookup(order: str) -> tuple[str, dict[str, Any]]:
        """Look an order up."""
        raise AssertionError("the dependency is not called while the circuit is open")

    msg = Toolkit(client(daemon, "w3"), {"lookup": b}).wrap(lookup).invoke(
        {"type": "tool_call", "name": "lookup", "args": {"order": "o1"}, "id": "tc-3"})
    assert json.loads(str(msg.content))["status"] == "circuit_open" and msg.artifact is None


async def test_wrap_async_guards_once(daemon: Daemon, name: Callable[[str], str]) -> None:
    """A sync tool run through ainvoke (LangChain runs its body in a
    thread) is one guarded call: one failure recorded, not two."""
    vendor = Vendor()
    b = name("payments")
    c = client(daemon, "w1")
    wrapped = Toolkit(c, {"refund_charge": b}).wrap(tools_of(vendor)[1])
    with pytest.raises(httpx.HTTPStatusError):
        await wrapped.ainvoke({"charge_id": "ch_1"})
    (st,) = c.batch_get([b])
    assert vendor.calls == 1 and int(st.get("failures", 0)) == 1


def test_failure_text_for_tool_node(daemon: Daemon, name: Callable[[str], str]) -> None:
    """ToolNode(handle_tool_errors=failure_text) gives the model breakerd's
    failure text, naming the tool."""
    wrapped = Toolkit(client(daemon, "w1"), {"refund_charge": name("payments")}).wrap(tools_of(Vendor())[1])
    out = run_node(wrapped, {"charge_id": "ch_1"}, handle=failure_text)["messages"][-1]
    assert out.content == _render.tool_failure("refund_charge")
    assert str(out.content).startswith("refund_charge failed")


# -- AsyncToolkit ----------------------------------------------------------------------


@pytest.fixture
def stalled(daemon: Daemon) -> Iterator[Proxy]:
    p = Proxy(daemon.url.removeprefix("http://"))
    yield p
    p.close()


async def test_async_toolkit_does_not_block_the_loop(stalled: Proxy, name: Callable[[str], str]) -> None:
    """While the daemon stalls, the first contact's wait happens off the
    event loop: another task runs meanwhile."""
    kit = AsyncToolkit(breakerd.Client(stalled.url, worker_id="w1", watch=False, first_contact_budget=30),
                       {"refund_charge": name("payments")})
    tools = tools_of(Vendor())
    stalled.stall()
    run = kit.new_run()
    asked = asyncio.ensure_future(run.available(tools))
    ran = asyncio.Event()
    asyncio.get_running_loop().call_soon(ran.set)
    await ran.wait()
    assert not asked.done()  # the loop ran another callback while available waits
    stalled.restore()
    assert [t.name for t in await asked] == ["web_search", "refund_charge"]
    with kit.using(run) as r:
        assert r is run.sync
