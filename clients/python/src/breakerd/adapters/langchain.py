"""breakerd for LangChain v1 agents and LangGraph (``pip install "breakerd[langchain]"``).

A ``create_agent`` agent takes the middleware (the client from
``BREAKERD_URL``, or ``client=``):

    agent = create_agent(model, tools, middleware=[BreakerdMiddleware(breakers={"refund_charge": "payments"})])

Before each model call it drops the tools whose breakers deny from the
model's tools, for the rest of the agent run, and adds the run's notice to
the system message; each tool call goes through breakerd, and a denial
becomes the tool's output (breakerd's circuit_open JSON).

A graph of your own (LangGraph's ``ToolNode``, any loop that runs tools)
uses a ``Toolkit`` (``AsyncToolkit`` under asyncio):

    kit = Toolkit(client, breakers={"refund_charge": "payments"})
    tools = [kit.wrap(t) for t in my_tools]
    run = kit.new_run()
    with kit.using(run):
        bound = model.bind_tools(run.available(tools))
        messages = [SystemMessage(run.notice()), ...] if run.notice() else [...]

``Toolkit.wrap`` returns a copy of the tool, of its own class, whose runs
go through breakerd: every field (``return_direct``, ``response_format``,
the error handlers) and every injected argument stays the tool's own.
``failure_text`` is the text of a failed call for ``ToolNode``'s
``handle_tool_errors`` and the middleware's ``handle_tool_errors``.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Annotated, Any, ClassVar, TypeVar

try:
    from langchain.agents.middleware.types import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
        PrivateStateAttr,
        ToolCallRequest,
    )
    from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
    from langchain_core.tools import BaseTool
    from langgraph.errors import GraphBubbleUp
except ImportError as e:  # pragma: no cover - the adapter's one requirement
    raise ImportError('breakerd.adapters.langchain needs langchain (pip install "breakerd[langchain]")') from e

from .. import _aio, _render
from .._aio import AsyncClient, AsyncRun
from .._client import Client
from .._errors import CircuitOpen
from .._guard import Exclude, Guard
from .._run import Run

__all__ = ["AsyncToolkit", "BreakerdMiddleware", "Toolkit", "failure_text"]

T = TypeVar("T")
Tool = TypeVar("Tool", bound=BaseTool)

# The Run the guarded tools report to in this context (Toolkit.using,
# and the middleware around each tool call).
_current: contextvars.ContextVar[Run | None] = contextvars.ContextVar("breakerd_langchain_run", default=None)
# The guarded tool whose async run is in progress: its sync body, run in a
# thread by LangChain, is that same call and is not guarded twice.
_inside: contextvars.ContextVar[int] = contextvars.ContextVar("breakerd_langchain_inside", default=0)


def failure_text(error: Exception) -> str:
    """failure_text is the model's text for a tool call that failed:
    breakerd's tool_failure template, which asks the model not to call the
    tool again at once. Give it to ``ToolNode(handle_tool_errors=...)``."""
    return _render.tool_failure(_tool_of(error))


def _tool_of(error: BaseException) -> str:
    return str(getattr(error, "breakerd_tool", "") or "")


class Toolkit:
    """Toolkit wraps LangChain tools with breakerd. ``breakers`` maps a
    tool's name to its breaker (the dependency it calls); a tool missing
    from it is its own. ``exclude`` is the guards' (``Client.guard``): the
    errors that are not the dependency's fault."""

    def __init__(self, client: Client | AsyncClient, breakers: Mapping[str, str] | None = None, *,
                 exclude: Exclude = None) -> None:
        self.client = client.sync if isinstance(client, AsyncClient) else client
        self.breakers: dict[str, str] = dict(breakers or {})
        self.exclude = exclude
        self._classes: dict[type[BaseTool], type[BaseTool]] = {}

    def breaker_of(self, tool: str) -> str:
        return self.breakers.get(tool, tool)

    def new_run(self) -> Run:
        return Run(self.client, self.breaker_of)

    @contextlib.contextmanager
    def using(self, run: Run | AsyncRun) -> Iterator[Run]:
        """using makes run the one the wrapped tools report to in this
        context (a denial then removes the tool from the run)."""
        r = run.sync if isinstance(run, AsyncRun) else run
        token = _current.set(r)
        try:
            yield r
        finally:
            _current.reset(token)

    def _guard(self, tool: str) -> Guard:
        run = _current.get()
        if run is not None:
            return run.guard(tool, exclude=self.exclude)
        return self.client.guard(self.breaker_of(tool), tool=tool, exclude=self.exclude)

    def wrap(self, tool: Tool, *, breaker: str | None = None) -> Tool:
        """wrap returns a copy of tool whose runs are guarded by breakerd
        (``breaker`` names its dependency): the same class and fields, so
        LangChain injects its arguments and shapes its output as the
        tool's own. A denial is the tool's output; what the tool raises is
        recorded first, then handled as the tool handles it (a
        ToolException with ``handle_tool_error`` becomes the model's text)."""
        if breaker:
            self.breakers[tool.name] = breaker
        if getattr(type(tool), "breakerd_guarded", False):
            return tool
        cls = self._classes.get(type(tool))
        if cls is None:
            cls = self._classes[type(tool)] = _guarded_class(type(tool), self._guard)
        copy: Tool = tool.model_copy()
        object.__setattr__(copy, "__class__", cls)
        return copy


class AsyncToolkit(Toolkit):
    """AsyncToolkit is Toolkit for asyncio: ``new_run()`` is an AsyncRun,
    so ``await run.available(tools)`` never blocks the event loop."""

    def new_run(self) -> AsyncRun:  # type: ignore[override]
        return AsyncRun.of(super().new_run())


def _guarded_class(base: type[BaseTool], guard: Callable[[str], Guard]) -> type[BaseTool]:
    """A subclass of base whose ``_run`` and ``_arun`` go through guard;
    they keep base's signatures, which LangChain reads to pass its
    arguments."""
    base_run, base_arun = base._run, base._arun

    @functools.wraps(base_run)
    def _run(self: BaseTool, *args: Any, **kwargs: Any) -> Any:
        if _inside.get() == id(self):
            return base_run(self, *args, **kwargs)
        try:
            with guard(self.name):
                return base_run(self, *args, **kwargs)
        except CircuitOpen as e:
            return _denied(self, e)
        except Exception as e:
            _mark(e, self.name)
            raise

    @functools.wraps(base_arun)
    async def _arun(self: BaseTool, *args: Any, **kwargs: Any) -> Any:
        token = _inside.set(id(self))
        try:
            async with guard(self.name):
                return await base_arun(self, *args, **kwargs)
        except CircuitOpen as e:
            return _denied(self, e)
        except Exception as e:
            _mark(e, self.name)
            raise
        finally:
            _inside.reset(token)

    ns = {"_run": _run, "_arun": _arun, "breakerd_guarded": True, "__annotations__": {"breakerd_guarded": ClassVar[bool]},
          "__module__": base.__module__, "__qualname__": base.__qualname__}
    return type(base.__name__, (base,), ns)


def _denied(tool: BaseTool, e: CircuitOpen) -> Any:
    if tool.response_format == "content_and_artifact":
        return e.tool_result, None
    return e.tool_result


def _mark(e: Exception, tool: str) -> None:
    """_mark names the tool on an error it raised, for failure_text
    (LangGraph's interrupts are no failure, and stay unmarked)."""
    if isinstance(e, GraphBubbleUp):
        return
    with contextlib.suppress(AttributeError, TypeError):
        if not getattr(e, "breakerd_tool", ""):
            e.breakerd_tool = tool  # type: ignore[attr-defined]


class BreakerdState(AgentState[Any], total=False):
    """The agent state's one breakerd field: which Run is this agent run's."""

    breakerd_run: Annotated[str, PrivateStateAttr]


# The agent runs a middleware keeps at most (the oldest is dropped: a run
# that never reached its end, such as one interrupted and never resumed).
MAX_RUNS = 4096


class BreakerdMiddleware(AgentMiddleware[BreakerdState, Any, Any]):
    """BreakerdMiddleware puts an agent's tools behind breakerd. Each agent
    run (one ``invoke``) is a breakerd Run: before every model call the
    tools whose breakers deny leave the model's tools for the rest of the
    run, and the run's notice joins the system message; every tool call is
    guarded, and a denial is the tool's output. ``client`` defaults to
    ``breakerd.Client()`` (``BREAKERD_URL``); ``breakers`` maps a tool's
    name to its breaker; ``exclude`` is the guards'. With
    ``handle_tool_errors`` (default), a failed call reaches the model as
    ``failure_text`` instead of ending the agent run."""

    state_schema = BreakerdState

    def __init__(self, client: Client | AsyncClient | None = None, breakers: Mapping[str, str] | None = None, *,
                 exclude: Exclude = None, handle_tool_errors: bool = True) -> None:
        super().__init__()
        self.kit = Toolkit(client if client is not None else Client(), breakers, exclude=exclude)
        self.handle_tool_errors = handle_tool_errors
        self._lock = threading.Lock()
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._tools: dict[int, tuple[BaseTool, BaseTool]] = {}

    # -- the agent run -----------------------------------------------------

    def before_agent(self, state: BreakerdState, runtime: Any) -> dict[str, Any] | None:
        key = uuid.uuid4().hex
        self._run_of(key)
        return {"breakerd_run": key}

    async def abefore_agent(self, state: BreakerdState, runtime: Any) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    def after_agent(self, state: BreakerdState, runtime: Any) -> dict[str, Any] | None:
        with self._lock:
            self._runs.pop(state.get("breakerd_run", ""), None)
        return None

    async def aafter_agent(self, state: BreakerdState, runtime: Any) -> dict[str, Any] | None:
        return self.after_agent(state, runtime)

    def run_of(self, state: Mapping[str, Any]) -> Run:
        """run_of is the breakerd Run of the agent run whose state this is
        (what it lost, ``run.degraded``, is for the final answer)."""
        return self._run_of(str(state.get("breakerd_run", "")))

    def _run_of(self, key: str) -> Run:
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = self.kit.new_run()
                while len(self._runs) > MAX_RUNS:
                    self._runs.popitem(last=False)
            return run

    # -- the model's tools -------------------------------------------------

    def wrap_model_call(self, request: ModelRequest[Any],
                        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]) -> ModelResponse[Any] | AIMessage:
        run = self.run_of(request.state)
        return handler(_with_run(request, run, run.available(_named(request.tools))))

    async def awrap_model_call(self, request: ModelRequest[Any],
                               handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]) -> ModelResponse[Any] | AIMessage:
        run = self.run_of(request.state)
        return await handler(_with_run(request, run, await _aio.available(run, _named(request.tools))))

    # -- the tool calls ----------------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        if request.tool is None:
            return handler(request)
        with self.kit.using(self.run_of(request.state)):
            try:
                return handler(request.override(tool=self._guarded(request.tool)))
            except Exception as e:
                return self._failed(request, e)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]) -> Any:
        if request.tool is None:
            return await handler(request)
        with self.kit.using(self.run_of(request.state)):
            try:
                return await handler(request.override(tool=self._guarded(request.tool)))
            except Exception as e:
                return self._failed(request, e)

    def _guarded(self, tool: BaseTool) -> BaseTool:
        with self._lock:
            seen = self._tools.get(id(tool))
            if seen is None or seen[0] is not tool:
                seen = self._tools[id(tool)] = (tool, self.kit.wrap(tool))
            return seen[1]

    def _failed(self, request: ToolCallRequest, e: Exception) -> ToolMessage:
        if not self.handle_tool_errors or not _tool_of(e):
            raise e  # not a tool's own failure (LangGraph's interrupts among them)
        call = request.tool_call
        return ToolMessage(content=failure_text(e), name=call["name"], tool_call_id=call["id"], status="error")


def _named(tools: Sequence[T]) -> list[T]:
    """The tools a run judges: those with a name (a provider's built-in
    tool given as a bare mapping has none, and is left as it is)."""
    return [t for t in tools if _name(t)]


def _name(tool: object) -> str:
    if isinstance(tool, Mapping):
        n = tool.get("name") or (tool.get("function") or {}).get("name")
        return n if isinstance(n, str) else ""
    n = getattr(tool, "name", "")
    return n if isinstance(n, str) else ""


def _with_run(request: ModelRequest[Any], run: Run, kept: list[Any]) -> ModelRequest[Any]:
    """request with the tools run kept (those without a name too) and the
    run's notice after its system message."""
    keep = {id(t) for t in kept}
    tools = [t for t in request.tools if id(t) in keep or not _name(t)]
    notice = run.notice()
    if not notice:
        return request.override(tools=tools)
    return request.override(tools=tools, system_message=_add_notice(request.system_message, notice))


def _add_notice(system: SystemMessage | None, notice: str) -> SystemMessage:
    if system is None:
        return SystemMessage(notice)
    if isinstance(system.content, str):
        content: Any = f"{system.content}\n\n{notice}" if system.content else notice
    else:
        content = [*system.content, {"type": "text", "text": notice}]
    return system.model_copy(update={"content": content})
