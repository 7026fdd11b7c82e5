"""An agent on LangChain v1 (create_agent, run by LangGraph) with breakerd's
middleware: a scripted chat model (no API key, no network) and two tools,
web_search (healthy) and refund_charge (whose payment vendor goes down),
run by two workers of one fleet against breakerd. It prints the tools and
the notice each run gives the model: the vendor's outage trips the fleet's
breaker, refund_charge leaves the model's tools (within the run that
trips it, and in the runs after), and the model is told why.

    go run ./cmd/breakerd --http-listen 127.0.0.1:7071 &
    pip install "./clients/python[langchain]"
    python examples/python/langchain_agent.py --url http://127.0.0.1:7071

Without a daemon at --url it starts one (`go run ./cmd/breakerd`, an
embedded Redis). The adoption is the lines marked "breakerd:".
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from _common import GIVEN_UP, Vendor, main, report, story
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

import breakerd
from breakerd.adapters.langchain import BreakerdMiddleware  # breakerd:


class ScriptedModel(BaseChatModel):
    """The model: refund if the tool is offered, then answer. Keeps the
    tools and the system message of each call."""

    tools: list[str] = []
    calls: list[tuple[list[str], str]] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.model_copy(update={"tools": [breakerd.tool_name(t) for t in tools]})

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        system = next((str(m.content) for m in messages if isinstance(m, SystemMessage)), "")
        self.calls.append((self.tools, system))
        if any(isinstance(m, ToolMessage) for m in messages):
            answer = AIMessage("Here is what the refund tool answered.")
        elif "refund_charge" in self.tools:
            answer = AIMessage("", tool_calls=[{"name": "refund_charge", "args": {"charge_id": "ch_42"}, "id": "call-1"}])
        else:
            answer = AIMessage(GIVEN_UP)
        return ChatResult(generations=[ChatGeneration(message=answer)])


async def one_run(url: str, prefix: str, n: int, worker: str, vendor: Vendor) -> None:
    @tool
    def web_search(query: str) -> str:
        """Search the web."""
        return '{"ok":true}'

    @tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return vendor.refund(charge_id)

    client = breakerd.AsyncClient(url, worker_id=worker, allow_budget=2.0, watch=False)
    model = ScriptedModel(calls=[])
    agent = create_agent(model, [web_search, refund_charge], system_prompt="Help the customer.",
                         middleware=[BreakerdMiddleware(client, {"refund_charge": prefix + "payments"})])  # breakerd:
    out = await agent.ainvoke({"messages": [("user", "Refund charge ch_42")]})
    tools, system = model.calls[0]
    report(n, worker, tools, system.partition("\n\n")[2], sys.stdout)
    for m in out["messages"]:
        if isinstance(m, ToolMessage):
            print(f"  model calls refund_charge -> {m.content}")
    print(f"  final answer: {out['messages'][-1].content}")
    await client.close()


def demo(url: str, prefix: str) -> None:
    asyncio.run(story(lambda n, worker, vendor: one_run(url, prefix, n, worker, vendor), sys.stdout))


if __name__ == "__main__":
    sys.exit(main(__doc__, sys.argv[1:], demo))
