"""The adapters when no daemon answers, inside the real frameworks with
their scripted models: the worker's local fallback counts the tool's
failures and trips on its own, and the model is told that this worker
judged alone. The denied call's output carries ``"degraded": true``
(conformance/templates/tool_result.tmpl) and the notice the model reads
carries the degraded sentence (conformance/templates/notice.tmpl). The
vendor counts its calls: none reaches it once the fallback denies."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agents
import httpx
import pytest
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import breakerd
from breakerd._fallback import LocalPolicy

from .test_adapters import Vendor, box_tools
from .test_adapters_langchain import ScriptedChat, langchain_tools

# Nothing listens on port 1: every call to the daemon is refused at once.
DEAD = "http://127.0.0.1:1"
# The failures the local fallback trips on, for a breaker whose policy it
# never read (no daemon answered to give one).
THRESHOLD = LocalPolicy().threshold
NOTICE = Path(__file__).resolve().parents[3] / "conformance" / "templates" / "notice.tmpl"


def degraded_sentence() -> str:
    """The notice's words for a tool this worker judged alone: the body
    of the template's degraded section."""
    m = re.search(r"\{\{#degraded\}\}(.*?)\{\{/degraded\}\}", NOTICE.read_text("utf-8"))
    assert m is not None, f"{NOTICE} has no degraded section"
    return m.group(1).strip()


@pytest.fixture
def dead() -> Iterator[breakerd.Client]:
    """A client no daemon answers."""
    c = breakerd.Client(DEAD, worker_id="w1", watch=False, savings_interval=0)
    yield c
    c.close()


def refunds_then_anyway() -> ScriptedChat:
    """THRESHOLD failing refunds, one more the model makes though the tool
    has left its tools, then an answer."""
    turns = [AIMessage("", tool_calls=[{"name": "refund_charge", "args": {"charge_id": "ch_1"}, "id": f"c{i}"}])
             for i in range(THRESHOLD + 1)]
    return ScriptedChat(messages=iter([*turns, AIMessage("Payments is out of service.")]), calls=[])


def assert_judged_alone(model: ScriptedChat, messages: list[AnyMessage], vendor: Vendor) -> None:
    """The model call after the trip is bound without refund_charge and
    reads the degraded notice; the refund it made anyway was denied with
    a degraded tool result and never reached the vendor."""
    bound = [c[0] for c in model.calls]
    assert bound == [["web_search", "refund_charge"]] * THRESHOLD + [["web_search"]] * 2
    notice = model.calls[THRESHOLD][1]
    assert "- refund_charge: " in notice and degraded_sentence() in notice
    denied = [m for m in messages if isinstance(m, ToolMessage)][-1]
    result = json.loads(str(denied.content))
    assert result["status"] == "circuit_open" and result["tool"] == "refund_charge"
    assert result["degraded"] is True
    assert vendor.calls == THRESHOLD


def test_create_agent_tells_the_model_the_worker_judged_alone(dead: breakerd.Client) -> None:
    """create_agent with the middleware, no daemon answering: the local
    fallback trips on the tool's own failures within the agent run."""
    from breakerd.adapters.langchain import BreakerdMiddleware
    from langchain.agents import create_agent

    vendor = Vendor()
    model = refunds_then_anyway()
    agent = create_agent(model, langchain_tools(vendor), middleware=[BreakerdMiddleware(dead, {"refund_charge": "payments"})])
    out = agent.invoke({"messages": [("user", "Refund charge ch_1")]})["messages"]
    assert_judged_alone(model, out, vendor)


def test_langgraph_toolkit_tells_the_model_the_worker_judged_alone(dead: breakerd.Client) -> None:
    """A LangGraph graph of one's own with the Toolkit (ToolNode runs the
    tools; each model step binds run.available and reads run.notice), no
    daemon answering: the same degraded words."""
    from breakerd.adapters.langchain import Toolkit

    vendor = Vendor()
    kit = Toolkit(dead, {"refund_charge": "payments"})
    tools = [kit.wrap(t) for t in langchain_tools(vendor)]
    model = refunds_then_anyway()
    run = kit.new_run()

    def think(messages: list[AnyMessage]) -> dict[str, list[BaseMessage]]:
        bound = model.bind_tools(run.available(tools))
        notice = run.notice()
        return {"messages": [bound.invoke([SystemMessage(notice), *messages] if notice else messages)]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda s: think(s["messages"]))
    graph.add_node("tools", ToolNode(tools, handle_tool_errors=True))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    with kit.using(run):
        out = graph.compile().invoke({"messages": [HumanMessage("Refund charge ch_1")]})["messages"]
    assert_judged_alone(model, out, vendor)


async def test_openai_agents_tell_the_model_the_worker_judged_alone(dead: breakerd.Client) -> None:
    """Toolbox.run, no daemon answering: the tool fails one short of the
    local trip; while the model thinks, another of this worker's calls to
    payments fails and the fallback opens, so the refund the model asks
    for is denied (degraded) and the next turn's instructions say the
    worker judged alone."""
    from breakerd.adapters.openai_agents import Toolbox

    agents.set_tracing_disabled(True)
    vendor = Vendor()
    box = Toolbox(dead, {"refund_charge": "payments"})
    tools = box_tools(box, vendor)

    def fail_then_refund(call: Any) -> Any:
        with pytest.raises(httpx.HTTPStatusError):
            with dead.guard("payments"):
                vendor.refund("ch_0")
        return [function_call("refund_charge", {"charge_id": "ch_1"}, call_id="denied")]

    steps: list[Any] = [[function_call("refund_charge", {"charge_id": "ch_1"}, call_id=f"c{i}")] for i in range(THRESHOLD - 1)]
    model = ScriptedModel([*steps, ModelStep.respond(fail_then_refund), [assistant_message("Payments is out of service.")]])
    agent = agents.Agent(name="support", instructions="Help the customer.", tools=tools, model=model)
    await box.run(agent, "Refund charge ch_1")
    last = model.last_call
    assert last is not None
    assert [t.name for t in last.tools] == ["web_search"]
    assert last.system_instructions is not None
    assert "- refund_charge: " in last.system_instructions and degraded_sentence() in last.system_instructions
    out = next(i for i in last.input if isinstance(i, dict) and i.get("call_id") == "denied" and i.get("type") == "function_call_output")
    result = json.loads(out["output"])
    assert result["status"] == "circuit_open" and result["degraded"] is True
    assert vendor.calls == THRESHOLD
