"""What the client holds as last known denying is what breakerd says
denies (a state's denial and deny_until_ms), never a state's name: with no
daemon answering, a breaker held so lets one call of this client out at a
time, and any other is the local fallback's alone. A scripted daemon sends
the states; the calls the fallback lets out are the witness."""

from __future__ import annotations

from typing import Any

import pytest

import breakerd

from .fakes import Fake, json_answer

B = "payments"
TICKET = {"generation": "3", "token": "t"}


def fallback_allowed_after(state: dict[str, Any], calls: int = 5) -> int:
    """How many of calls sequential Allows the fallback lets out once the
    daemon that answered a Record with state is gone."""

    def handle(method: str, _body: Any) -> tuple[int, str, bytes]:
        if method == "Allow":
            return json_answer({"decision": "DECISION_ALLOWED", "ticket": TICKET, "state": {"breaker": B, "generation": "3"}})
        if method == "Record":
            return json_answer({"counted": False, "state": {"breaker": B, "generation": "3", "as_of_ms": "1000", **state}})
        return json_answer({})

    fake = Fake(handle)
    fake.drop_idle = True  # closed, it answers nothing more
    # Budgets a busy host cannot run past: the daemon is gone only once closed.
    c = breakerd.Client(fake.url, worker_id="w1", watch=False, rpc_timeout=30, allow_budget=30)
    try:
        p = c.allow(B)
        assert p.allowed and not p.degraded
        c.record(p, breakerd.HttpError(503, "vendor down"))
        assert any(m == "Record" for m, _ in fake.requests), "the Record reached the daemon"
        fake.close()
        got = [c.allow(B) for _ in range(calls)]
        assert all(g.degraded for g in got), [g.decision for g in got]
        return sum(g.allowed for g in got)
    finally:
        c.close()
        fake.close()


def test_a_state_named_open_that_does_not_deny_is_not_held() -> None:
    # Shadow mode: the breaker is open by its name, and Allow lets every call through.
    assert fallback_allowed_after({"state": "STATE_OPEN", "shadow": True, "deny_until_ms": "0"}) == 5


@pytest.mark.parametrize("name", ["STATE_CLOSED", "STATE_FORCED_OPEN", "STATE_PAUSED"])
def test_a_state_breakerd_says_denies_is_held_whatever_its_name(name: str) -> None:
    denial = {"decision": "DECISION_DENIED_OPEN", "scope": "DENIAL_SCOPE_PARENT", "deny_until_ms": "1000", "reason": "r"}
    assert fallback_allowed_after({"state": name, "deny_until_ms": "1000", "denial": denial}) == 1
