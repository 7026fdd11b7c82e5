"""Denial: one denial as breakerd decides and words it.

The daemon sends it with every denying answer (Allow's ``denial``, a
state's ``denial``, and ``suspect_denial`` for the suspect worker); the
client keeps it as it came and renders it through the shared templates
(``_render``). The local fallback's denials, the only ones this client
makes itself, take their words from conformance/fallback_denials.json
(a copy ships in the package).
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# deny_until_ms of a denial that lasts until an operator acts.
FOREVER = (1 << 63) - 1

_SCOPE_PREFIX = "DENIAL_SCOPE_"


def int64(v: object) -> int:
    """int64 reads an int64 of the proto3 JSON mapping (a string, or a
    number); 0 for anything else."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        return 0
    try:
        return int(v)
    except ValueError:
        return 0


@dataclass(frozen=True)
class Denial:
    """Denial is breakerd.v1.Denial: ``decision`` (a DENIED_* name),
    ``status`` (the status word) and ``reason`` (words for a model),
    ``scope`` (a DenialScope name), ``forced``, ``deny_until_ms`` (until
    when it holds, on the Redis clock; FOREVER until an operator acts)
    and ``may_return_at_ms`` (when the tool may be back; 0 when unknown)."""

    decision: str
    status: str
    reason: str
    scope: str = _SCOPE_PREFIX + "BREAKER"
    forced: bool = False
    deny_until_ms: int = 0
    may_return_at_ms: int = 0

    @classmethod
    def of(cls, doc: object) -> Denial | None:
        """of reads a Denial's JSON form; None for none (or one without
        its status word)."""
        if not isinstance(doc, Mapping) or not doc.get("status"):
            return None
        return cls(
            decision=str(doc.get("decision", "")),
            status=str(doc["status"]),
            reason=str(doc.get("reason", "")),
            scope=str(doc.get("scope") or _SCOPE_PREFIX + "BREAKER"),
            forced=doc.get("forced") is True,
            deny_until_ms=int64(doc.get("deny_until_ms")),
            may_return_at_ms=int64(doc.get("may_return_at_ms")),
        )

    @property
    def scope_word(self) -> str:
        """The templates' word for the scope: breaker, parent or worker."""
        word = self.scope.removeprefix(_SCOPE_PREFIX).lower()
        return "breaker" if word in ("", "unspecified") else word

    def retry_after_ms(self, now_ms: int) -> int:
        """How long until the tool may be back, at now_ms (the Redis
        clock); 0 when unknown (a probe in flight, an operator's pin)."""
        return max(0, self.may_return_at_ms - now_ms) if self.may_return_at_ms > 0 else 0


def of_state(st: Mapping[str, Any], worker_id: str) -> Denial | None:
    """of_state is the denial a breaker state holds for worker_id: its
    ``suspect_denial`` when worker_id is the suspect (a state sent to
    many), else its ``denial`` (the asking worker's, or the fleet's)."""
    if worker_id and st.get("suspect_worker") == worker_id:
        own = Denial.of(st.get("suspect_denial"))
        if own is not None:
            return own
    return Denial.of(st.get("denial"))


# -- the local fallback's own denials --------------------------------------------


def data(name: str) -> Any:
    """data is one of the package's copies of conformance/ files."""
    return json.loads(importlib.resources.files("breakerd").joinpath("data").joinpath(name).read_text("utf-8"))


@functools.cache
def _fallback_words() -> dict[str, tuple[str, str]]:
    doc = data("fallback_denials.json")
    return {k: (str(doc[k]["status"]), str(doc[k]["reason"])) for k in ("open", "probe_in_flight")}


def fallback(decision: str, probe_in_flight: bool, deny_until_ms: int) -> Denial:
    """fallback is the local fallback's denial (decision: its DENIED_*):
    open until deny_until_ms, or its one probe in flight (no return time:
    a lease is no wait)."""
    status, reason = _fallback_words()["probe_in_flight" if probe_in_flight else "open"]
    return Denial(decision=decision, status=status, reason=reason, deny_until_ms=deny_until_ms,
                  may_return_at_ms=0 if probe_in_flight else deny_until_ms)
