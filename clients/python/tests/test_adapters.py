"""The adapters inside real frameworks (pinned in requirements-test.txt),
with scripted models, no network and no API key: a vendor's outage trips
the fleet's breaker, then the tool is gone from the next run's tool list
and the model is given the notice."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

import breakerd

from .conftest import Daemon

WORKERS = ("w1", "w2", "w1")  # three failures from two workers: the test policy's trip


class Vendor:
    """The payments vendor, down: every call is a 503. Counts its calls
    (the wire is the witness: none once the breaker is open)."""

    def __init__(self) -> None:
        self.calls = 0

    def refund(self, charge_id: str) -> str:
        self.calls += 1
        httpx.Response(503, request=httpx.Request("POST", "http://payments/refunds")).raise_for_status()
        return "refunded " + charge_id


def box_tools(box: Any, vendor: Vendor) -> list[Any]:
    """The two tools the Agents SDK tests give a model, through box (a
    Toolbox): web_search, and refund_charge, which calls vendor."""
    @box.function_tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return vendor.refund(charge_id)

    @box.function_tool
    def web_search(query: str) -> str:
        """Search the web."""
        return "results for " + query

    return [web_search, refund_charge]


def client(d: Daemon, worker: str) -> breakerd.Client:
    return breakerd.Client(d.url, worker_id=worker, allow_budget=5, watch=False)


# -- OpenAI Agents SDK -------------------------------------------------------------


async def test_openai_agents(daemon: Daemon, name: Callable[[str], str]) -> None:
    import agents
    from agents.testing import ScriptedModel, assistant_message, function_call

    from breakerd.adapters.openai_agents import Toolbox

    agents.set_tracing_disabled(True)
    vendor = Vendor()
    breakers = {"refund_charge": name("payments"), "web_search": name("search")}

    def toolbox(worker: str) -> tuple[Toolbox, list[Any]]:
        box = Toolbox(client(daemon, worker), breakers)
        return box, box_tools(box, vendor)

    def agent(model: ScriptedModel, tools: list[Any]) -> Any:
        return agents.Agent(name="support", instructions="Help the customer.", tools=tools, model=model)

    for i, worker in enumerate(WORKERS):
        box, tools = toolbox(worker)
        model = ScriptedModel([[function_call("refund_charge", {"charge_id": "ch_1"}, call_id=f"call-{i}")],
                               [assistant_message("The refund failed.")]])
        await box.run(agent(model, tools), "Refund charge ch_1")
        assert model.first_call is not None
        assert [t.name for t in model.first_call.tools] == ["web_search", "refund_charge"]
    assert vendor.calls == 3

    box, tools = toolbox("w3")
    model = ScriptedModel([[assistant_message("I could not refund ch_1: payments is out of service.")]])
    result = await box.run(agent(model, tools), "Refund charge ch_1")
    call = model.first_call
    assert call is not None
    assert [t.name for t in call.tools] == ["web_search"]
    assert call.system_instructions is not None
    assert call.system_instructions.startswith("Help the customer.\n\nSome tools are out of service")
    assert "- refund_charge: " in call.system_instructions and "issue_refund_manually" in call.system_instructions
    assert result.final_output.startswith("I could not refund")
    assert vendor.calls == 3
    model.assert_complete()


async def test_openai_agents_mid_run_denial(daemon: Daemon, name: Callable[[str], str]) -> None:
    """A tool the model calls after its breaker opened mid-run reads the
    denial as its output; the vendor is not called."""
    import agents
    from agents.testing import ScriptedModel, assistant_message, function_call

    from breakerd.adapters.openai_agents import Toolbox

    agents.set_tracing_disabled(True)
    vendor = Vendor()
    b = name("payments")
    for worker in WORKERS:
        with pytest.raises(httpx.HTTPStatusError):
            with client(daemon, worker).guard(b):
                vendor.refund("ch_0")
    box = Toolbox(client(daemon, "w3"), {"refund_charge": b})

    @box.function_tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return vendor.refund(charge_id)

    model = ScriptedModel([[function_call("refund_charge", {"charge_id": "ch_1"}, call_id="c1")],
                           [assistant_message("Payments is down.")]])
    # The agent as built, unfiltered: the model calls the tool anyway.
    await agents.Runner.run(agents.Agent(name="a", tools=[refund_charge], model=model), "Refund ch_1")
    last = model.last_call
    assert last is not None
    outputs = [i for i in last.input if isinstance(i, dict) and i.get("type") == "function_call_output"]
    denial = json.loads(outputs[0]["output"])
    assert denial["status"] == "circuit_open" and denial["tool"] == "refund_charge"
    assert vendor.calls == 3


# -- LangChain, run by LangGraph ----------------------------------------------------


def test_langchain_langgraph(daemon: Daemon, name: Callable[[str], str]) -> None:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
    from langchain_core.tools import BaseTool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from breakerd.adapters.langchain import Toolkit

    class ToolCallingFake(GenericFakeChatModel):
        """GenericFakeChatModel with bind_tools (it has none): records the
        tool names each run binds."""

        bound: list[list[str]] = []

        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
            self.bound.append([t.name for t in tools])
            return self

    from .test_adapters_langchain import langchain_tools

    vendor = Vendor()
    web_search, refund_charge = langchain_tools(vendor)
    breakers = {"refund_charge": name("payments"), "web_search": name("search")}

    def run_agent(worker: str, script: list[AIMessage]) -> tuple[ToolCallingFake, list[AnyMessage]]:
        kit = Toolkit(client(daemon, worker), breakers)
        tools: list[BaseTool] = [kit.wrap(web_search), kit.wrap(refund_charge)]
        model = ToolCallingFake(messages=iter(script))
        run = kit.new_run()
        with kit.using(run):
            allowed = run.available(tools)
            bound = model.bind_tools(allowed)
            graph = StateGraph(MessagesState)
            graph.add_node("model", lambda s: {"messages": [bound.invoke(s["messages"])]})
            graph.add_node("tools", ToolNode(allowed, handle_tool_errors=True))
            graph.add_edge(START, "model")
            graph.add_conditional_edges("model", tools_condition)
            graph.add_edge("tools", "model")
            start: list[AnyMessage] = [SystemMessage(run.notice())] if run.notice() else []
            out = graph.compile().invoke({"messages": [*start, HumanMessage("Refund charge ch_1")]})
        return model, out["messages"]

    for i, worker in enumerate(WORKERS):
        call = AIMessage("", tool_calls=[{"name": "refund_charge", "args": {"charge_id": "ch_1"}, "id": f"c{i}"}])
        model, messages = run_agent(worker, [call, AIMessage("The refund failed.")])
        assert model.bound[-1] == ["web_search", "refund_charge"]
        assert "503" in str(messages[-2].content)  # the tool's error, as LangGraph reports it
    assert vendor.calls == 3

    model, messages = run_agent("w3", [AIMessage("Payments is out of service.")])
    assert model.bound[-1] == ["web_search"]
    assert isinstance(messages[0], SystemMessage)
    assert "- refund_charge: " in str(messages[0].content)
    assert vendor.calls == 3


def test_langchain_tool_exception_is_recorded(daemon: Daemon, name: Callable[[str], str]) -> None:
    """LangChain's idiomatic failure, a ToolException with
    handle_tool_error=True, reaches the model as the tool's text and is
    recorded by what it was raised from (a 503): three from two workers
    trip the breaker, and the vendor is called no more."""
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import StructuredTool, ToolException
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from breakerd.adapters.langchain import Toolkit

    vendor = Vendor()

    def refund(charge_id: str) -> str:
        """Refund a card charge."""
        try:
            return vendor.refund(charge_id)
        except httpx.HTTPStatusError:
            raise ToolException("the payments service failed; try later")

    refund_charge = StructuredTool.from_function(refund, name="refund_charge", handle_tool_error=True)

    b = name("payments")
    for i, worker in enumerate([*WORKERS, "w3"]):
        kit = Toolkit(client(daemon, worker), {"refund_charge": b})
        graph = StateGraph(MessagesState)
        graph.add_node("tools", ToolNode([kit.wrap(refund_charge)]))
        graph.add_edge(START, "tools")
        call = AIMessage("", tool_calls=[{"name": "refund_charge", "args": {"charge_id": "ch_1"}, "id": f"c{i}"}])
        out = graph.compile().invoke({"messages": [call]})["messages"][-1]
        assert isinstance(out, ToolMessage)
        if i < len(WORKERS):
            assert out.content == "the payments service failed; try later"
        else:
            assert json.loads(str(out.content))["tool"] == "refund_charge"  # the denial, as the tool's output
    assert vendor.calls == 3


# -- the OpenAI and Anthropic SDKs' plain tools=[...] lists ---------------------------


OPENAI_TOOLS = [
    {"type": "function", "function": {"name": "web_search", "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "refund_charge", "parameters": {"type": "object", "properties": {}}}},
]
ANTHROPIC_TOOLS = [
    {"name": "web_search", "input_schema": {"type": "object", "properties": {}}},
    {"name": "refund_charge", "input_schema": {"type": "object", "properties": {}}},
]


def test_sdk_tool_lists(daemon: Daemon, name: Callable[[str], str]) -> None:
    """The SDKs send the filtered list and the notice (read on the wire
    of their HTTP libraries' MockTransport: no network, no key)."""
    sent: list[dict[str, Any]] = []

    def openai_api(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                                         "choices": [{"index": 0, "finish_reason": "stop",
                                                      "message": {"role": "assistant", "content": "ok"}}]})

    def anthropic_api(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(200, json={"id": "m", "type": "message", "role": "assistant", "model": "m",
                                          "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                                          "usage": {"input_tokens": 1, "output_tokens": 1}})

    oai = openai.OpenAI(api_key="test", base_url="http://openai.test/v1",
                        http_client=httpx.Client(transport=httpx.MockTransport(openai_api)))
    ant = anthropic.Anthropic(api_key="test", base_url="http://anthropic.test",
                              http_client=httpx2.Client(transport=httpx2.MockTransport(anthropic_api)))
    breakers = {"refund_charge": name("payments"), "web_search": name("search")}
    vendor = Vendor()
    for worker in WORKERS:
        with pytest.raises(httpx.HTTPStatusError):
            with client(daemon, worker).guard(breakers["refund_charge"], tool="refund_charge"):
                vendor.refund("ch_1")

    run = breakerd.Run(client(daemon, "w3"), breakers)
    tools = run.available(OPENAI_TOOLS)
    oai.chat.completions.create(model="m", tools=tools,  # type: ignore[arg-type]
                                messages=[{"role": "system", "content": run.notice()}, {"role": "user", "content": "Refund ch_1"}])
    atools = run.available(ANTHROPIC_TOOLS)
    ant.messages.create(model="m", max_tokens=10, tools=atools, system=run.notice(),  # type: ignore[arg-type]
                        messages=[{"role": "user", "content": "Refund ch_1"}])
    assert [t["function"]["name"] for t in sent[0]["tools"]] == ["web_search"]
    assert "- refund_charge: " in sent[0]["messages"][0]["content"]
    assert [t["name"] for t in sent[1]["tools"]] == ["web_search"]
    assert "- refund_charge: " in sent[1]["system"]
    assert vendor.calls == 3


# -- a worker the fleet suspects ------------------------------------------------------


def suspect(d: Daemon, breaker: str, worker: str) -> str:
    """Fails breaker's calls from worker alone until it is the suspect (the
    test policy's threshold, no second worker); returns the words of the
    daemon's denial for it."""
    c = client(d, worker)
    for _ in range(3):
        with pytest.raises(httpx.HTTPStatusError):
            with c.guard(breaker):
                Vendor().refund("ch_0")
    (st,) = c.batch_get([breaker])
    assert st.get("suspect_worker") == worker and client(d, "w2").allow(breaker).allowed  # the fleet keeps it
    reason = str(st["denial"]["reason"])
    assert reason
    return reason


def notice_line(text: str, tool: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"- {tool}: "))


async def test_openai_agents_suspect_worker(daemon: Daemon, name: Callable[[str], str]) -> None:
    """A worker whose calls alone fail loses the tool for its runs, with
    the daemon's words for it, and its own denial's status."""
    import agents
    from agents.testing import ScriptedModel, assistant_message, function_call

    from breakerd.adapters.openai_agents import Toolbox

    agents.set_tracing_disabled(True)
    b = name("payments")
    reason = suspect(daemon, b, "w1")
    box = Toolbox(client(daemon, "w1"), {"refund_charge": b})

    @box.function_tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return Vendor().refund(charge_id)

    model = ScriptedModel([[assistant_message("Refunds are out of service here.")]])
    await box.run(agents.Agent(name="a", instructions="Help.", tools=[refund_charge], model=model), "Refund ch_1")
    call = model.first_call
    assert call is not None and [t.name for t in call.tools] == []
    assert call.system_instructions is not None
    assert notice_line(call.system_instructions, "refund_charge").startswith(f"- refund_charge: {reason.rstrip('. ')}.")

    # Unfiltered, the model calls it anyway: the tool output is this
    # worker's denial, never the fleet's circuit_open.
    model = ScriptedModel([[function_call("refund_charge", {"charge_id": "ch_1"}, call_id="c1")],
                           [assistant_message("Refunds are out of service here.")]])
    await agents.Runner.run(agents.Agent(name="a", tools=[refund_charge], model=model), "Refund ch_1")
    assert model.last_call is not None
    out = next(i for i in model.last_call.input if isinstance(i, dict) and i.get("type") == "function_call_output")
    denial = json.loads(out["output"])
    assert denial["status"] == "worker_isolated" and denial["scope"] == "worker" and denial["reason"] == reason.rstrip(". ")


def test_langgraph_suspect_worker(daemon: Daemon, name: Callable[[str], str]) -> None:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from breakerd.adapters.langchain import Toolkit

    @tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return Vendor().refund(charge_id)

    b = name("payments")
    reason = suspect(daemon, b, "w1")
    kit = Toolkit(client(daemon, "w1"), {"refund_charge": b})
    tools = [kit.wrap(refund_charge)]
    run = kit.new_run()
    with kit.using(run):
        assert run.available(tools) == []
        assert notice_line(run.notice(), "refund_charge").startswith(f"- refund_charge: {reason.rstrip('. ')}.")
        graph = StateGraph(MessagesState)
        graph.add_node("tools", ToolNode(tools))
        graph.add_edge(START, "tools")
        call = AIMessage("", tool_calls=[{"name": "refund_charge", "args": {"charge_id": "ch_1"}, "id": "c1"}])
        out = graph.compile().invoke({"messages": [SystemMessage(run.notice()), HumanMessage("Refund"), call]})
    msg = out["messages"][-1]
    assert isinstance(msg, ToolMessage)
    assert json.loads(str(msg.content))["status"] == "worker_isolated"
