"""breakerd for LangChain tools (``pip install langchain-core``), in any
loop that runs them (LangGraph's ToolNode, an agent executor).

    kit = Toolkit(client, breakers={"refund_charge": "payments"})
    tools = [kit.wrap(t) for t in my_tools]
    run = kit.new_run()
    with kit.using(run):
        bound = model.bind_tools(run.available(tools))
        messages = [SystemMessage(run.notice()), ...] if run.notice() else [...]

``Toolkit.wrap`` returns a tool of the same name, description and
arguments whose calls go through breakerd: a denial becomes the tool's
output (breakerd's circuit_open JSON), which the model reads; whatever the
tool raised is recorded and re-raised. ``Run.available`` filters a list of
LangChain tools by name.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

try:
    from langchain_core.tools import BaseTool, StructuredTool
except ImportError as e:  # pragma: no cover - the adapter's one requirement
    raise ImportError("breakerd.adapters.langchain needs the langchain-core package (pip install langchain-core)") from e

from .._client import Client
from .._errors import CircuitOpen
from .._guard import Exclude, Guard
from .._run import Run

__all__ = ["Toolkit"]

_current: contextvars.ContextVar[Run | None] = contextvars.ContextVar("breakerd_langchain_run", default=None)


class Toolkit:
    """Toolkit wraps LangChain tools with breakerd. ``breakers`` maps a
    tool's name to its breaker (the dependency it calls); a tool missing
    from it is its own. ``exclude`` is the guards' (``Client.guard``): the
    errors that are not the dependency's fault."""

    def __init__(self, client: Client, breakers: Mapping[str, str] | None = None, *, exclude: Exclude = None) -> None:
        self.client = client
        self.breakers: dict[str, str] = dict(breakers or {})
        self.exclude = exclude

    def breaker_of(self, tool: str) -> str:
        return self.breakers.get(tool, tool)

    def new_run(self) -> Run:
        return Run(self.client, self.breaker_of)

    @contextlib.contextmanager
    def using(self, run: Run) -> Iterator[Run]:
        """using makes run the one the wrapped tools report to in this
        context (a denial then removes the tool from the run)."""
        token = _current.set(run)
        try:
            yield run
        finally:
            _current.reset(token)

    def _guard(self, tool: str) -> Guard:
        run = _current.get()
        if run is not None:
            return run.guard(tool, exclude=self.exclude)
        return self.client.guard(self.breaker_of(tool), tool=tool, exclude=self.exclude)

    def wrap(self, tool: BaseTool, *, breaker: str | None = None) -> BaseTool:
        """wrap returns tool guarded by breakerd (``breaker`` names its
        dependency). A ToolException the tool raises is recorded (with what
        it was raised from) before the wrapper's ``handle_tool_error``, the
        tool's own, turns it into the model's text."""
        if breaker:
            self.breakers[tool.name] = breaker
        name = tool.name
        handle = tool.handle_tool_error
        if handle:
            tool = tool.model_copy(update={"handle_tool_error": False})  # the guard sees the exception

        def call(**kwargs: Any) -> Any:
            try:
                with self._guard(name):
                    return tool.invoke(kwargs)
            except CircuitOpen as e:
                return e.tool_result

        async def acall(**kwargs: Any) -> Any:
            try:
                async with self._guard(name):
                    return await tool.ainvoke(kwargs)
            except CircuitOpen as e:
                return e.tool_result

        return StructuredTool.from_function(func=call, coroutine=acall, name=name, description=tool.description,
                                            args_schema=tool.args_schema, infer_schema=False,
                                            handle_tool_error=handle, handle_validation_error=tool.handle_validation_error)
