"""An agent on the OpenAI Agents SDK with breakerd's adapter: a scripted
model (the SDK's own ScriptedModel: no API key, no network) and two tools,
web_search (healthy) and refund_charge (whose payment vendor goes down),
run by two workers of one fleet against breakerd. It prints the tools and
the notice each run gives the model: the vendor's outage trips the fleet's
breaker, refund_charge leaves the next runs' tools, and the model is told
why. The Python twin of examples/agent.

    go run ./cmd/breakerd --http-listen 127.0.0.1:7071 &
    pip install "./clients/python[openai-agents]"
    python examples/python/agent.py --url http://127.0.0.1:7071

Without a daemon at --url it starts one (`go run ./cmd/breakerd`, an
embedded Redis) with a policy that offers issue_refund_manually instead
of payments. The adoption is the lines marked "breakerd:".
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import agents
from _common import GIVEN_UP, Vendor, main, report, story
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

import breakerd
from breakerd.adapters.openai_agents import Toolbox  # breakerd:


def model_for(n: int) -> ScriptedModel:
    """The model: refund if the tool is offered, then answer."""

    def first(call: ModelCall) -> Any:
        if "refund_charge" not in [t.name for t in call.tools]:
            return [assistant_message(GIVEN_UP)]
        return [function_call("refund_charge", {"charge_id": "ch_42"}, call_id=f"run{n}")]

    return ScriptedModel([ModelStep.respond(first), [assistant_message("Here is what the refund tool answered.")]])


async def one_run(url: str, prefix: str, n: int, worker: str, vendor: Vendor) -> None:
    client = breakerd.Client(url, worker_id=worker, allow_budget=2.0, watch=False)
    box = Toolbox(client, {"refund_charge": prefix + "payments", "web_search": prefix + "search"})  # breakerd:

    @agents.function_tool
    def web_search(query: str) -> str:
        """Search the web."""
        return '{"ok":true}'

    @agents.function_tool
    def refund_charge(charge_id: str) -> str:
        """Refund a card charge."""
        return vendor.refund(charge_id)

    model = model_for(n)
    agent = agents.Agent(name="support", instructions="Help the customer.", tools=[web_search, refund_charge], model=model)
    result = await box.run(agent, "Refund charge ch_42")  # breakerd: was agents.Runner.run(agent, ...)
    first = model.calls[0]
    report(n, worker, [t.name for t in first.tools], (first.system_instructions or "").partition("\n\n")[2], sys.stdout)
    for item in result.new_items:
        if isinstance(item, agents.ToolCallOutputItem):
            print(f"  model calls refund_charge -> {item.output}")
    print(f"  final answer: {result.final_output}")
    client.close()


def demo(url: str, prefix: str) -> None:
    agents.set_tracing_disabled(True)
    asyncio.run(story(lambda n, worker, vendor: one_run(url, prefix, n, worker, vendor), sys.stdout))


if __name__ == "__main__":
    sys.exit(main(__doc__, sys.argv[1:], demo))
