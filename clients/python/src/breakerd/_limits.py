"""What the client refuses before any round trip: the daemon's limits on
a request (internal/limits), and the types its arguments must have. Bad
input is an error naming its field, never an answer of the fallback."""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ._errors import InvalidArgument

# The daemon's worker id syntax (internal/limits.WorkerID; docs/security.md#worker-ids).
WORKER_ID = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")

# The daemon's rules for a breaker's name and a tool's (AllowRequest).
MAX_NAME_BYTES = 256
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")

# The bound on every *_ms duration a request carries (internal/limits.MaxDurationMs).
MAX_DURATION_MS = 7 * 24 * 3600 * 1000


def _any(v: object) -> bool:
    """Any value of a rule's types keeps it."""
    return True


@dataclass(frozen=True)
class Rule:
    """Rule is what one field must be: ``what`` in words ("a str or
    None"), the ``types`` it may have, and ``ok``, a test of a value of
    those types."""

    what: str
    types: type | tuple[type, ...]
    ok: Callable[[Any], bool] = _any

    def fault(self, v: object) -> str:
        """fault says why v breaks the rule ("must be a str, got int");
        empty when it keeps it. A value of the wrong type is named by its
        type alone, so a secret given in the wrong place is not echoed."""
        if not isinstance(v, self.types):
            return f"must be {self.what}, got {type(v).__name__}"
        if not self.ok(v):
            return f"must be {self.what}, got {shown(v)}"
        return ""


def shown(v: object) -> str:
    """shown names a refused value: a number or a str as written,
    anything larger by its type."""
    return repr(v) if isinstance(v, (int, float, str)) else type(v).__name__


def finite(v: Any) -> bool:
    """finite says v is a real number that is not a bool, NaN or
    infinite."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


# A duration in milliseconds a request carries (latency_ms, deadline_ms).
DURATION_MS = Rule(f"a whole number of ms from 0 to {MAX_DURATION_MS} (7 days)", int,
                   lambda v: not isinstance(v, bool) and 0 <= v <= MAX_DURATION_MS)
# A guard's deadline: the seconds its call has, None when it has none.
DEADLINE = Rule("None or a finite number of seconds", (numbers.Real, type(None)), lambda v: v is None or finite(v))


def check(field: str, rule: Rule, v: object) -> None:
    """check raises InvalidArgument naming field when v breaks rule."""
    why = rule.fault(v)
    if why:
        raise InvalidArgument.refused(field, why)


def check_name(field: str, v: object) -> None:
    """check_name raises InvalidArgument naming field for a breaker name
    breakerd would refuse (the daemon's words), or one that is no str."""
    why = ""
    if not isinstance(v, str):
        why = f"must be a string, got {type(v).__name__}"
    elif v == "":
        why = "is required"
    elif len(v.encode()) > MAX_NAME_BYTES:
        why = f"is {len(v.encode())} bytes; at most {MAX_NAME_BYTES}"
    elif not v.isprintable():
        why = f"must be printable UTF-8 (no control characters), got {v!r}"
    elif v.strip() != v:
        why = f"must not start or end with white space, got {v!r}"
    if why:
        raise InvalidArgument.refused(field, why)


def check_tool(v: object) -> None:
    """check_tool raises InvalidArgument for a tool name breakerd would
    refuse, or one that is no str; "" lets the breaker's name stand in."""
    if not isinstance(v, str):
        raise InvalidArgument.refused("tool", f"must be a string, got {type(v).__name__}")
    if v and not TOOL_NAME.fullmatch(v):
        raise InvalidArgument.refused("tool", f"must be 1 to 128 of A-Z a-z 0-9 _ - ., got {v!r}")


def check_names(field: str, v: object) -> list[str]:
    """check_names returns v's breaker names as a list, or raises
    InvalidArgument: naming field when v is a str alone (it would be read
    letter by letter) or nothing to iterate, else naming the element
    ("breakers[3]") as the daemon does."""
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise InvalidArgument.refused(field, f"must be a list of breaker names (a str alone would be read letter "
                                       f"by letter), got {type(v).__name__}")
    names = list(v)
    for i, name in enumerate(names):
        check_name(f"{field}[{i}]", name)
    return names


def clamp_ms(ms: int) -> int:
    """clamp_ms returns ms within [0, MAX_DURATION_MS] (the daemon's
    limits.ClampMs): a spent deadline is none left."""
    return min(max(ms, 0), MAX_DURATION_MS)
