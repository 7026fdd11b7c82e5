"""breakerd for the OpenAI Agents SDK (``pip install openai-agents``).

    box = Toolbox(client, breakers={"refund_charge": "payments"})

    @box.function_tool
    def refund_charge(charge_id: str) -> str: ...

    result = await box.run(agent, "Refund charge ch_1")

``Toolbox.function_tool`` is the SDK's ``function_tool`` over a guarded
function: each call is allowed and recorded by breakerd, and a denial
becomes the tool's output (breakerd's circuit_open JSON), which the model
reads. ``Toolbox.run`` runs the agent with the tools of this run only
(``breakerd.Run``): a tool whose breaker denies leaves the agent's tool
list, and the run notice joins its instructions.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

try:
    import agents
except ImportError as e:  # pragma: no cover - the adapter's one requirement
    raise ImportError("breakerd.adapters.openai_agents needs the openai-agents package (pip install openai-agents)") from e

from .._client import Client
from .._errors import CircuitOpen
from .._guard import Exclude, Guard
from .._run import Run

__all__ = ["Toolbox"]

# The Run of the agent run in progress in this context (Toolbox.run sets
# it; the SDK runs tools in tasks that inherit it).
_current: contextvars.ContextVar[Run | None] = contextvars.ContextVar("breakerd_run", default=None)


class Toolbox:
    """Toolbox makes guarded function tools and runs agents with the tools
    a breakerd Run allows. ``breakers`` maps a tool's name to its breaker
    (the dependency it calls); a tool missing from it is its own.
    ``exclude`` is the guards' (``Client.guard``): the errors that are not
    the dependency's fault."""

    def __init__(self, client: Client, breakers: Mapping[str, str] | None = None, *, exclude: Exclude = None) -> None:
        self.client = client
        self.breakers: dict[str, str] = dict(breakers or {})
        self.exclude = exclude

    def breaker_of(self, tool: str) -> str:
        return self.breakers.get(tool, tool)

    def new_run(self) -> Run:
        return Run(self.client, self.breaker_of)

    def function_tool(self, fn: Callable[..., Any] | None = None, /, *, breaker: str | None = None,
                      **kwargs: Any) -> Any:
        """function_tool is ``agents.function_tool`` (same keyword
        arguments) over fn guarded by breakerd; ``breaker`` names its
        dependency. Used bare (``@box.function_tool``) or with arguments,
        it returns an ``agents.FunctionTool``."""

        def make(f: Callable[..., Any]) -> agents.FunctionTool:
            name = kwargs.get("name_override") or f.__name__
            if breaker:
                self.breakers[name] = breaker
            return agents.function_tool(self._guarded(f, name), **kwargs)

        return make(fn) if fn is not None else make

    def _guard(self, tool: str) -> Guard:
        run = _current.get()
        if run is not None:
            return run.guard(tool, exclude=self.exclude)
        return self.client.guard(self.breaker_of(tool), tool=tool, exclude=self.exclude)

    def _guarded(self, fn: Callable[..., Any], tool: str) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def call_async(*args: Any, **kw: Any) -> Any:
                try:
                    async with self._guard(tool):
                        return await fn(*args, **kw)
                except CircuitOpen as e:
                    return e.tool_result

            return call_async

        @functools.wraps(fn)
        def call(*args: Any, **kw: Any) -> Any:
            try:
                with self._guard(tool):
                    return fn(*args, **kw)
            except CircuitOpen as e:
                return e.tool_result

        return call

    async def agent_for(self, agent: agents.Agent[Any], run: Run) -> agents.Agent[Any]:
        """agent_for is agent with only the tools run allows now, and the
        run notice added to its instructions when the run lost any."""
        tools = await asyncio.to_thread(run.available, list(agent.tools))
        return agent.clone(tools=tools, instructions=_with_notice(agent.instructions, run))

    async def run(self, agent: agents.Agent[Any], input: Any, *, run: Run | None = None, **kwargs: Any) -> agents.RunResult:
        """run is ``agents.Runner.run`` on agent_for(agent, run) (a new
        Run unless given), with the run's guard on every tool call."""
        run = run or self.new_run()
        token = _current.set(run)
        try:
            return await agents.Runner.run(await self.agent_for(agent, run), input, **kwargs)
        finally:
            _current.reset(token)


def _with_notice(instructions: Any, run: Run) -> Any:
    notice = run.notice()
    if not notice:
        return instructions
    if instructions is None or isinstance(instructions, str):
        return f"{instructions}\n\n{notice}" if instructions else notice
    base: Callable[..., Any] = instructions

    async def dynamic(ctx: Any, agent: Any) -> str:
        text = base(ctx, agent)
        if isinstance(text, Awaitable):
            text = await text
        return f"{text}\n\n{run.notice()}"

    return dynamic
