"""breakerd for the OpenAI Agents SDK (``pip install "breakerd[openai-agents]"``).

    box = Toolbox(client, breakers={"refund_charge": "payments"})

    @function_tool
    def refund_charge(charge_id: str) -> str: ...

    result = await box.run(agent, "Refund charge ch_1")

``Toolbox.run`` (``run_sync``, ``run_streamed``) is the SDK's ``Runner``
with one ``breakerd.Run`` for the agent run: before each turn the tools
whose breakers deny leave the model's tool list (each function tool's
``is_enabled``), for the rest of the run, and the run's notice joins the
instructions (a callable); each call is allowed and recorded by breakerd
(the SDK's tool guardrails and failure function), a denial becomes the
tool's output (breakerd's circuit_open JSON), and a failure reaches the
model as ``failure_text``. The agents it hands off to, and the tools of
MCP servers, are judged and guarded the same way. ``Toolbox.function_tool``
is the SDK's ``function_tool`` over a guarded function, for tools run
outside ``Toolbox.run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

try:
    import agents
    from agents.mcp import MCPServer
    from agents.tool import resolve_function_tool_failure_error_function
    from agents.tool_guardrails import (
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolInputGuardrailData,
        ToolOutputGuardrail,
        ToolOutputGuardrailData,
    )
    from mcp.types import CallToolResult, TextContent
except ImportError as e:  # pragma: no cover - the adapter's one requirement
    raise ImportError('breakerd.adapters.openai_agents needs the openai-agents package (pip install "breakerd[openai-agents]")') from e

from .. import _aio, _render
from .._aio import AsyncClient
from .._client import Client
from .._errors import CircuitOpen
from .._guard import Exclude, Guard
from .._run import Run

__all__ = ["Toolbox", "failure_text"]


def failure_text(ctx: Any, error: Exception) -> str:
    """failure_text is the model's text for a tool call that failed
    (breakerd's tool_failure template): a ``failure_error_function`` for
    ``function_tool`` and ``mcp_config``. ``Toolbox.function_tool`` gives
    it to every tool that names none."""
    return _render.tool_failure(str(getattr(ctx, "tool_name", "") or ""))


class _Scope:
    """_Scope is one agent run's Run, and the toolset check of the turn in
    progress. The SDK asks each tool's is_enabled while it prepares a turn,
    and again before it runs the calls the model made: a tool lost between
    the two would make the model's call an error that ends the run. So a
    turn's tools are judged only while it is prepared (from the start, or
    a tool's end, to the model call); a tool lost later is denied by the
    run's guard, with no round trip, and leaves at the next turn."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.preparing = True
        self._turn: asyncio.Future[list[str]] | None = None

    async def judge(self, names: Sequence[str]) -> None:
        """judge asks breakerd about names once for all the checks a turn
        makes at once (the SDK asks about each tool concurrently)."""
        if not self.preparing:
            return
        turn = self._turn
        if turn is None or turn.done():
            turn = self._turn = asyncio.ensure_future(_aio.available(self.run, list(names)))
        await asyncio.shield(turn)


# The agent run in progress in this context (Toolbox.run sets it; the SDK
# runs turns and tools in tasks that inherit it).
_current: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("breakerd_run", default=None)


class Toolbox:
    """Toolbox makes guarded function tools and runs agents with the tools
    a breakerd Run allows. ``client`` defaults to ``breakerd.Client()``
    (``BREAKERD_URL``); ``breakers`` maps a tool's name to its breaker
    (the dependency it calls); a tool missing from it is its own.
    ``exclude`` is the guards' (``Client.guard``): the errors that are not
    the dependency's fault."""

    def __init__(self, client: Client | AsyncClient | None = None, breakers: Mapping[str, str] | None = None, *,
                 exclude: Exclude = None) -> None:
        if client is None:
            client = Client()
        self.client = client.sync if isinstance(client, AsyncClient) else client
        self.breakers: dict[str, str] = dict(breakers or {})
        self.exclude = exclude

    def breaker_of(self, tool: str) -> str:
        return self.breakers.get(tool, tool)

    def new_run(self) -> Run:
        return Run(self.client, self.breaker_of)

    def function_tool(self, fn: Callable[..., Any] | None = None, /, *, breaker: str | None = None,
                      **kwargs: Any) -> Any:
        """function_tool is ``agents.function_tool`` (same keyword
        arguments; ``failure_error_function`` defaults to failure_text)
        over fn guarded by breakerd; ``breaker`` names its dependency.
        Used bare (``@box.function_tool``) or with arguments, it returns an
        ``agents.FunctionTool``."""

        def make(f: Callable[..., Any]) -> agents.FunctionTool:
            name = kwargs.get("name_override") or f.__name__
            if breaker:
                self.breakers[name] = breaker
            kw = {"failure_error_function": failure_text, **kwargs}
            made = agents.function_tool(self._guarded(f, name), **kw)
            made.breakerd_guarded = True  # type: ignore[attr-defined]
            return made

        return make(fn) if fn is not None else make

    def _guard(self, tool: str) -> Guard:
        scope = _current.get()
        if scope is not None:
            return scope.run.guard(tool, exclude=self.exclude)
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

    # -- the agent run -----------------------------------------------------

    async def agent_for(self, agent: agents.Agent[Any], run: Run) -> agents.Agent[Any]:
        """agent_for is agent as a run of it sees it: each function tool
        enabled while run has it and its breaker allows, the run notice
        after the instructions, MCP servers whose tools are judged and
        guarded the same way, and the agents it hands off to likewise."""
        return _Cloner(self).clone(agent)

    async def run(self, agent: agents.Agent[Any], input: Any, *, run: Run | None = None,
                  **kwargs: Any) -> agents.RunResult:
        """run is ``agents.Runner.run`` on agent_for(agent, run) (a new
        Run unless given), with the run's guard on every tool call."""
        with self._scope(run):
            return await agents.Runner.run(_Cloner(self).clone(agent), input, **kwargs)

    def run_sync(self, agent: agents.Agent[Any], input: Any, *, run: Run | None = None,
                 **kwargs: Any) -> agents.RunResult:
        """run_sync is ``agents.Runner.run_sync`` as run does it."""
        with self._scope(run):
            return agents.Runner.run_sync(_Cloner(self).clone(agent), input, **kwargs)

    def run_streamed(self, agent: agents.Agent[Any], input: Any, *, run: Run | None = None,
                     **kwargs: Any) -> agents.RunResultStreaming:
        """run_streamed is ``agents.Runner.run_streamed`` as run does it
        (the streaming task keeps the run)."""
        with self._scope(run):
            return agents.Runner.run_streamed(_Cloner(self).clone(agent), input, **kwargs)

    @contextlib.contextmanager
    def _scope(self, run: Run | None) -> Iterator[_Scope]:
        scope = _Scope(run or self.new_run())
        token = _current.set(scope)
        try:
            yield scope
        finally:
            _current.reset(token)


class _Cloner:
    """_Cloner copies an agent and the agents it hands off to (each once,
    cycles kept) as a run of them sees them."""

    def __init__(self, box: Toolbox) -> None:
        self.box = box
        self.done: dict[int, agents.Agent[Any]] = {}

    def clone(self, agent: agents.Agent[Any]) -> agents.Agent[Any]:
        if id(agent) in self.done:
            return self.done[id(agent)]
        handoffs: list[Any] = []
        c = agent.clone(tools=[_judged(t, self.box) for t in agent.tools], handoffs=handoffs,
                        instructions=_with_notice(agent.instructions), hooks=_Hooks(agent.hooks),
                        mcp_servers=[_JudgedServer(s, self.box) for s in agent.mcp_servers])
        self.done[id(agent)] = c
        handoffs.extend(self.clone(h) if isinstance(h, agents.Agent) else h for h in agent.handoffs)
        return c


def _judged(tool: Any, box: Toolbox) -> Any:
    """tool, enabled only while the run in progress has it and its
    breaker allows (and while its own is_enabled holds); a function tool
    not made by box.function_tool is guarded too (_guard_calls)."""
    if not isinstance(tool, agents.FunctionTool):
        return tool
    own = tool.is_enabled

    async def enabled(ctx: agents.RunContextWrapper[Any], agent: Any) -> bool:
        scope = _current.get()
        if scope is not None:
            await scope.judge([t.name for t in getattr(agent, "tools", ()) if isinstance(t, agents.FunctionTool)])
            if scope.run.removed(tool.name):
                return False
        if isinstance(own, bool):
            return own
        ok = own(ctx, agent)
        return bool(await ok) if isinstance(ok, Awaitable) else bool(ok)

    judged = copy.copy(tool)
    judged.is_enabled = enabled
    if not getattr(tool, "breakerd_guarded", False):
        _guard_calls(judged, tool, box)
    return judged


def _guard_calls(judged: agents.FunctionTool, tool: agents.FunctionTool, box: Toolbox) -> None:
    """_guard_calls puts judged's calls behind breakerd through the SDK's
    own hooks: a tool input guardrail asks (a denial rejects the call,
    its text the call's output), a tool output guardrail records a
    success, and the failure function records what the tool raised, then
    answers as the tool would (breakerd's failure_text for the SDK's
    default)."""
    held: dict[str, Guard] = {}
    own = None if tool._use_default_failure_error_function else resolve_function_tool_failure_error_function(tool)

    async def ask(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        g = box._guard(tool.name)
        try:
            await g.__aenter__()
        except CircuitOpen as e:
            return ToolGuardrailFunctionOutput.reject_content(e.tool_result)
        held[data.context.tool_call_id] = g
        return ToolGuardrailFunctionOutput.allow()

    async def succeeded(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        g = held.pop(data.context.tool_call_id, None)
        if g is not None:
            await g.__aexit__(None, None, None)
        return ToolGuardrailFunctionOutput.allow()

    async def failed(ctx: Any, error: Exception) -> str:
        g = held.pop(str(getattr(ctx, "tool_call_id", "")), None)
        if g is not None:
            await g.__aexit__(type(error), error, error.__traceback__)
        if own is None:
            return failure_text(ctx, error)
        text = own(ctx, error)
        return await text if isinstance(text, Awaitable) else text

    judged.tool_input_guardrails = [*(tool.tool_input_guardrails or []), ToolInputGuardrail(ask, name="breakerd")]
    judged.tool_output_guardrails = [*(tool.tool_output_guardrails or []), ToolOutputGuardrail(succeeded, name="breakerd")]
    judged._use_default_failure_error_function = False
    judged._failure_error_function = failed


def _with_notice(instructions: Any) -> Any:
    """The instructions, with the run's notice after them whenever the run
    has lost a tool (read at each turn)."""

    async def dynamic(ctx: Any, agent: Any) -> str | None:
        text = instructions
        if callable(instructions):
            text = instructions(ctx, agent)
            if isinstance(text, Awaitable):
                text = await text
        scope = _current.get()
        notice = scope.run.notice() if scope is not None else ""
        if not notice:
            return text if text is None else str(text)
        return f"{text}\n\n{notice}" if text else notice

    return dynamic


class _Hooks(agents.AgentHooks[Any]):
    """An agent's own hooks, which also mark when a turn is prepared
    (_Scope): the model call ends it, a tool's end starts the next."""

    def __init__(self, own: agents.AgentHooks[Any] | None) -> None:
        self.own = own

    async def on_llm_start(self, context: Any, agent: Any, system_prompt: str | None, input_items: Any) -> None:
        _preparing(False)
        if self.own is not None:
            await self.own.on_llm_start(context, agent, system_prompt, input_items)

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        _preparing(True)
        if self.own is not None:
            await self.own.on_tool_end(context, agent, tool, result)

    async def on_handoff(self, context: Any, agent: Any, source: Any) -> None:
        _preparing(True)
        if self.own is not None:
            await self.own.on_handoff(context, agent, source)

    async def on_start(self, context: Any, agent: Any) -> None:
        if self.own is not None:
            await self.own.on_start(context, agent)

    async def on_end(self, context: Any, agent: Any, output: Any) -> None:
        if self.own is not None:
            await self.own.on_end(context, agent, output)

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        if self.own is not None:
            await self.own.on_tool_start(context, agent, tool)

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        if self.own is not None:
            await self.own.on_llm_end(context, agent, response)


def _preparing(on: bool) -> None:
    scope = _current.get()
    if scope is not None:
        scope.preparing = on


class _JudgedServer(MCPServer):
    """An MCP server as a run sees it: its tools judged as the function
    tools are (by their MCP names), its calls guarded. Everything else is
    the server's own."""

    def __init__(self, server: MCPServer, box: Toolbox) -> None:  # no super().__init__: all is the server's
        self.server, self.box = server, box

    def __getattr__(self, name: str) -> Any:
        return getattr(self.server, name)

    @property
    def name(self) -> str:
        return self.server.name

    async def connect(self) -> None:
        await self.server.connect()  # type: ignore[no-untyped-call]

    async def cleanup(self) -> None:
        await self.server.cleanup()  # type: ignore[no-untyped-call]

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[Any]:
        tools = await self.server.list_tools(run_context, agent)
        scope = _current.get()
        if scope is None:
            return tools
        await scope.judge([t.name for t in tools])
        return [t for t in tools if not scope.run.removed(t.name)]

    async def call_tool(self, tool_name: str, arguments: dict[str, Any] | None,
                        meta: dict[str, Any] | None = None) -> CallToolResult:
        try:
            async with self.box._guard(tool_name):
                return await self.server.call_tool(tool_name, arguments, meta)
        except CircuitOpen as e:
            return CallToolResult(content=[TextContent(type="text", text=e.tool_result)])

    async def list_prompts(self) -> Any:
        return await self.server.list_prompts()

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        return await self.server.get_prompt(name, arguments)
