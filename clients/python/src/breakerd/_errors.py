"""The exceptions the client raises.

A denial is ``CircuitOpen`` (carrying the text the model reads). Anything
the caller got wrong, or a daemon that answers with something other than
breakerd's JSON, is a ``BreakerdError`` subclass naming what is wrong; it
is never taken for an outage. An outage (a slow or unreachable daemon)
raises nothing: answers come from the fallback, marked degraded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._denial import Denial


class BreakerdError(Exception):
    """BreakerdError is the base of every error this client raises."""


class ConfigError(BreakerdError, ValueError):
    """ConfigError is a bad argument to the client itself: a malformed
    daemon URL, an empty worker id, a budget below zero. An option of the
    wrong type or out of its range is named first ("token: must be ...")."""


@dataclass(frozen=True)
class FieldViolation:
    """FieldViolation names one bad field of a request and why."""

    field: str
    description: str


class APIError(BreakerdError):
    """APIError is an error answer from breakerd: its gRPC code name
    (``INVALID_ARGUMENT``), its message, the field violations it named,
    the HTTP status and the URL that answered. The client's own check of
    a request, before it goes out, raises one too: status 0, no URL."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int,
        url: str,
        violations: Sequence[FieldViolation] = (),
    ) -> None:
        self.code = code
        self.message = message
        self.status = status
        self.url = url
        self.violations = tuple(violations)
        origin = f"HTTP {status} from {url}" if status else "refused by the client, not sent"
        text = f"breakerd {code} ({origin}): {message}"
        if self.violations:
            text += " [" + "; ".join(f"{v.field}: {v.description}" for v in self.violations) + "]"
        super().__init__(text)

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of the fields breakerd refused, in its order."""
        return tuple(v.field for v in self.violations)


class InvalidArgument(APIError):
    """InvalidArgument is breakerd refusing a request's content: a breaker
    name, a worker id, a ticket. ``violations`` names the fields."""

    @classmethod
    def refused(cls, field: str, why: str) -> InvalidArgument:
        """refused is the client's own refusal of one field, before any
        round trip: the text "field: why", status 0, no URL."""
        return cls("INVALID_ARGUMENT", f"{field}: {why}", status=0, url="", violations=(FieldViolation(field, why),))


class Unauthenticated(APIError):
    """Unauthenticated is a 401: the token is missing or wrong."""


class PermissionDenied(APIError):
    """PermissionDenied is a 403: the token's role may not make this
    call."""


class ProtocolError(BreakerdError):
    """ProtocolError is an answer that is not breakerd's: HTML from a
    proxy, a body that is not JSON, JSON of the wrong shape. It names the
    URL, the HTTP status (0: the answer was not HTTP) and the start of
    the body."""

    def __init__(self, url: str, status: int, what: str, body: bytes = b"") -> None:
        self.url = url
        self.status = status
        self.body = body[:200]
        snippet = self.body.decode("utf-8", "replace").replace("\n", " ")
        text = f"{url} answered {f'HTTP {status} with ' if status else ''}{what}, not breakerd's JSON"
        if snippet:
            text += f": {snippet!r}"
        super().__init__(text)


@dataclass
class CircuitOpen(BreakerdError):
    """CircuitOpen is a denial: the call did not go out. ``tool_result``
    is the text to hand the model as the tool's output (breakerd's
    template over ``denial``, breakerd's Denial, or the local fallback's);
    ``degraded`` says breakerd was not consulted (the open cache or the
    local fallback decided)."""

    breaker: str
    decision: str
    reason: str
    retry_after_ms: int
    tool_result: str
    tool: str = ""
    scope: str = ""
    alternatives: tuple[str, ...] = ()
    degraded: bool = False
    state: Mapping[str, Any] = field(default_factory=dict)
    denial: Denial | None = None

    def __post_init__(self) -> None:
        super().__init__(f"{self.breaker}: {self.decision}: {self.reason}")

    def __str__(self) -> str:
        return f"{self.breaker}: {self.decision}: {self.reason}"
