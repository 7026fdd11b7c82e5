"""breakerd: the fleet-wide circuit breaker for AI-agent tool calls.

    import breakerd

    client = breakerd.Client("http://127.0.0.1:7071")

    @client.guard("payments", tool="refund_charge")
    def refund_charge(charge_id: str) -> dict: ...

A denial raises ``CircuitOpen`` carrying ``tool_result``, the text to hand
the model. ``Run`` keeps one agent run's toolset. ``AsyncClient`` and
``AsyncRun`` are the asyncio twins.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

from ._aio import AsyncClient, AsyncRun
from ._client import Client, Permit, default_worker_id
from ._fast import FAST_NOT_SENT
from ._errors import (
    APIError,
    BreakerdError,
    CircuitOpen,
    ConfigError,
    FieldViolation,
    InvalidArgument,
    PermissionDenied,
    ProtocolError,
    Unauthenticated,
)
from ._evidence import HttpError, MalformedOutput, evidence_of, raise_for_status
from ._guard import EXCLUDED_OUTCOME, Guard
from ._run import Run, Unavailable, tool_name

try:
    # The one version: the installed distribution's (pyproject.toml's,
    # stamped from the release tag by scripts/release.sh).
    __version__ = _version("breakerd")
except PackageNotFoundError:  # imported from a source tree never installed
    __version__ = "0+unknown"

__all__ = [
    "EXCLUDED_OUTCOME",
    "FAST_NOT_SENT",
    "APIError",
    "AsyncClient",
    "AsyncRun",
    "BreakerdError",
    "CircuitOpen",
    "Client",
    "ConfigError",
    "FieldViolation",
    "Guard",
    "HttpError",
    "InvalidArgument",
    "MalformedOutput",
    "Permit",
    "PermissionDenied",
    "ProtocolError",
    "Run",
    "Unauthenticated",
    "Unavailable",
    "__version__",
    "default_worker_id",
    "evidence_of",
    "raise_for_status",
    "tool_name",
]
