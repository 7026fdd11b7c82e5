"""The words a model reads: a denial's tool result and a run's notice.

Both are rendered from breakerd's templates (conformance/templates), the
same text the daemon and the Go client render from the same inputs. The
client renders them itself only when the daemon did not answer (the open
cache or the local fallback decided), and for a run's notice.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._run import Unavailable

# deny_until_ms of a denial that lasts until an operator acts.
FOREVER = (1 << 63) - 1

_DECISION_OF_STATE = {
    "STATE_OPEN": "DECISION_DENIED_OPEN",
    "STATE_HALF_OPEN": "DECISION_DENIED_PROBE_IN_FLIGHT",
    "STATE_FORCED_OPEN": "DECISION_DENIED_FORCED_OPEN",
    "STATE_PAUSED": "DECISION_DENIED_PAUSED",
}


def decision_of(st: dict[str, Any]) -> str:
    """decision_of names the denial a denying state answers with."""
    return _DECISION_OF_STATE.get(str(st.get("state", "")), "DECISION_DENIED_PARENT_OPEN" if st.get("parent") else "DECISION_DENIED_OPEN")


def tool_result(tool: str, breaker: str, decision: str, reason: str, retry_ms: int, st: dict[str, Any], degraded: bool) -> str:
    """tool_result renders the circuit_open JSON a model receives."""
    doc: dict[str, Any] = {
        "status": "probe_in_flight" if decision == "DECISION_DENIED_PROBE_IN_FLIGHT" else "circuit_open",
        "tool": tool,
        "breaker": breaker,
        "reason": reason,
        "retry_after_ms": retry_ms,
        "alternatives": list(st.get("alternatives", [])),
    }
    if decision == "DECISION_DENIED_FORCED_OPEN":
        doc["forced"] = True
    if degraded:
        doc["degraded"] = True
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def notice(lost: Sequence[Unavailable], now_ms: int) -> str:
    """notice renders the run notice over the tools a run lost; empty when
    it lost none."""
    if not lost:
        return ""
    lines = ["Some tools are out of service and have been removed from your tools for the rest of this task:"]
    for u in lost:
        line = f"- {u.tool}: {u.reason.rstrip('. ')}."
        if u.decision == "DECISION_DENIED_PROBE_IN_FLIGHT":
            line += " It is being tested after an outage; its recovery is not confirmed, so it will not come back during this task."
        elif 0 < u.deny_until_ms < FOREVER:
            line += f" It may be back in about {max(1, (u.deny_until_ms - now_ms) // 1000)}s, but not during this task."
        else:
            line += " No return time is known."
        if u.degraded:
            line += " (Judged by this worker alone: the breaker service is unreachable.)"
        if u.alternatives:
            line += " Instead you can use: " + ", ".join(u.alternatives) + "."
        lines.append(line)
    lines.append("Continue the task with the tools you still have; do not try to call the removed ones. "
                 "In your final answer, say which parts of the task could not be done because of them.")
    return "\n".join(lines)
