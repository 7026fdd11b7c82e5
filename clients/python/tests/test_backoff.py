"""A hung daemon (accepts, never answers) is asked again on the Go
client's schedule (1 s, doubling to 30 s), on the client's clock, which
the tests move; a late one is slow, not gone; a daemon back from a loss
gets no caller's call until a probe finds it in time. The fake daemons'
connection and request counts are the witnesses."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import breakerd
from breakerd._transport import Outage

from .fakes import Fake, json_answer
from .test_daemon import wait_for

ALLOWED = {"decision": "DECISION_ALLOWED", "ticket": {"generation": "4"}, "state": {"breaker": "b", "state": "STATE_CLOSED"}}
UNAVAILABLE = {"code": "UNAVAILABLE", "message": "redis unreachable"}


class Clock:
    """The client's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Daemon:
    """A fake daemon whose mode the test sets: "hung" (holds every
    request until released), "answer" (after delay seconds), or
    "unavailable"."""

    def __init__(self) -> None:
        self.mode = "answer"
        self.delay = 0.0
        self.fake = Fake(self.handle)

    def handle(self, method: str, body: Any) -> tuple[int, str, bytes]:
        if self.mode == "hung":
            self.fake.release.wait()
        if self.mode == "unavailable":
            return json_answer(UNAVAILABLE, 503)
        if self.delay:
            time.sleep(self.delay)
        if isinstance(body, dict) and body.get("breaker") == "held":
            self.fake.release.wait()
        return json_answer(ALLOWED if method == "Allow" else {})

    def calls(self, method: str, breaker: str | None = None) -> int:
        return sum(m == method and (breaker is None or b.get("breaker") == breaker) for m, b in self.fake.requests)


@pytest.fixture
def daemons() -> Iterator[Callable[[], Daemon]]:
    made: list[Daemon] = []

    def make() -> Daemon:
        made.append(Daemon())
        return made[-1]

    yield make
    for d in made:
        d.fake.close()


SCHEDULE = [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


def test_a_hung_daemon_is_asked_again_on_the_go_schedule(daemons: Callable[[], Daemon],
                                                          caplog: pytest.LogCaptureFixture,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.WARNING, logger="breakerd")
    d = daemons()
    d.mode = "hung"
    clock = Clock()
    c = breakerd.Client(d.fake.url, worker_id="w1", watch=False, clock=clock, allow_budget=0.05,
                        first_contact_budget=0.1, rpc_timeout=0.2, savings_interval=0)
    # What the client sent, each a connection of its own at the hung daemon:
    # a call whose thread starts past its budget (a busy host) sends none.
    attempts: list[str] = []
    attempt = c.transport._attempt

    def counted(idx: int, method: str, payload: bytes, timeout: float, begun: float | None) -> tuple[int, str, bytes]:
        attempts.append(method)
        return attempt(idx, method, payload, timeout, begun)

    monkeypatch.setattr(c.transport, "_attempt", counted)
    try:
        assert c.allow("b").degraded
        wait_for(lambda: c.reach.down, "the hung daemon taken as gone after the RPC timeout")
        assert len(attempts) <= 1, attempts
        # The fake counts a connection once its thread for it runs, which
        # on a busy host can be after the client gave up on it.
        wait_for(lambda: d.fake.connections == len(attempts), "the first Allow's connection at the daemon")
        sent = len(attempts)
        for _ in range(20):
            assert c.allow("b").degraded  # no wait: the fallback answers at once
        assert len(attempts) == sent and d.fake.connections == sent, "no call waits for a hung daemon"
        first_sent = sent
        for i, wait in enumerate(SCHEDULE):
            clock.now += wait - 0.1
            c.allow("b")
            assert c.reach.probes == i, f"re-probe {i + 1} sent {0.1}s before its back-off of {wait}s"
            clock.now += 0.1
            c.allow("b")
            assert c.reach.probes == i + 1, f"re-probe {i + 1} not sent after its back-off of {wait}s"
            wait_for(lambda: not c.reach.probing, f"re-probe {i + 1} to time out")
            assert len(attempts) - sent <= 1, f"re-probe {i + 1} sent {len(attempts) - sent} calls, want at most one"
            sent = len(attempts)
            wait_for(lambda: d.fake.connections == sent, f"re-probe {i + 1}'s one connection at the daemon")
        assert sent > first_sent, "no re-probe reached the daemon"
        d.mode = "answer"

        def reprobe() -> bool:
            # A re-probe that misses its RPC timeout on a busy host is
            # followed by the next on the schedule: move the clock past it.
            clock.now += SCHEDULE[-1]
            c.allow("b")
            return not c.reach.down

        wait_for(reprobe, "a re-probe finding the daemon")
        wait_for(lambda: not c.allow("b").degraded, "the daemon's own answer")
        said = [r.getMessage() for r in caplog.records]
        assert sum("no daemon at" in m for m in said) == 1, said
        assert sum("answers again" in m for m in said) == 1, said
    finally:
        c.close()


def test_the_first_contact_budget_is_spent_once_per_client(daemons: Callable[[], Daemon],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that has never reached a daemon waits the first-contact
    budget on its first Allow only: the next ones, sent while the first is
    still out (the daemon not yet taken as gone), wait the Allow budget.
    The budgets the client waited are the witnesses."""
    d = daemons()
    d.mode = "hung"
    c = breakerd.Client(d.fake.url, worker_id="w1", watch=False, allow_budget=0.05,
                        first_contact_budget=0.3, rpc_timeout=60.0, savings_interval=0)
    waited: list[float] = []
    budget = c._budget

    def spy(breaker: str) -> float:
        waited.append(budget(breaker))
        return waited[-1]

    monkeypatch.setattr(c, "_budget", spy)
    try:
        for _ in range(3):
            assert c.allow("b").degraded
        assert not c.reach.down, "the daemon taken as gone before the first call's RPC timeout"
        assert waited == [0.3, 0.05, 0.05], "the first-contact budget once, then the Allow budget"
    finally:
        d.fake.release.set()
        c.close()


def test_a_late_daemon_is_slow_not_hung(daemons: Callable[[], Daemon]) -> None:
    d = daemons()
    c = breakerd.Client(d.fake.url, worker_id="w1", watch=False, allow_budget=0.05, rpc_timeout=5.0,
                        savings_interval=0)
    try:
        c.check()
        # Far past the Allow budget (a busy host's late start of the wait
        # still sees the fallback's answer), well within the RPC timeout.
        d.delay = 1.0
        for _ in range(5):
            assert c.allow("b").degraded, "the fallback answers the late Allow"
        wait_for(lambda: d.calls("Allow") == 5, "every Allow at the slow daemon")
        assert not c.reach.down and c.reach.losses == 0 and c.transport.probes == 0
    finally:
        c.close()


def test_a_hung_daemon_is_failed_over_and_probed_in_the_background(daemons: Callable[[], Daemon]) -> None:
    hung, live = daemons(), daemons()
    hung.mode = "hung"
    clock = Clock()
    # A generous Allow budget and RPC timeout: on a busy host the live
    # daemon may answer slower than tight ones, and its calls would read
    # as the fallback's, or go on to the hung daemon (a connection more
    # there than the probes').
    c = breakerd.Client([hung.fake.url, live.fake.url], worker_id="w1", watch=False, clock=clock,
                        allow_budget=5.0, rpc_timeout=2.0, savings_interval=0)
    try:
        c.allow("b")  # the first call finds the hung daemon
        wait_for(lambda: live.calls("Allow") == 1, "the failover")
        wait_for(lambda: hung.fake.connections == 1, "the first call's connection at the hung daemon")
        for _ in range(20):
            assert not c.allow("b").degraded
        assert hung.fake.connections == 1, "no caller's call tries the hung daemon again"
        for i, wait in enumerate(SCHEDULE[:3]):
            clock.now += wait - 0.1
            c.allow("b")
            assert c.transport.probes == i
            clock.now += 0.1
            c.allow("b")
            assert c.transport.probes == i + 1, f"probe {i + 1} not sent after its back-off of {wait}s"
            wait_for(lambda: not any(c.transport._probing), f"probe {i + 1} to time out")
            wait_for(lambda: hung.fake.connections == i + 2, f"probe {i + 1}'s one connection at the hung daemon")
        assert hung.calls("Allow") == 1, "only probes reach the hung daemon"
        assert not c.reach.down and c.reach.losses == 0
    finally:
        c.close()


def test_a_rejoin_is_as_quiet_as_a_loss(daemons: Callable[[], Daemon]) -> None:
    """a: answers Unavailable (lost), then answers past the Allow budget
    (back, cold, as a daemon busy with its start), the probe its back-off
    is due for too. b answers, with one call held past the Allow budget,
    so that the calls start elsewhere when they can. The Allow budget is
    one a busy host's answers from b come within: a call still out at b
    past it would pass b over too."""
    budget = 2.0
    a, b = daemons(), daemons()
    clock = Clock()
    c = breakerd.Client([a.fake.url, b.fake.url], worker_id="w1", watch=False, clock=clock,
                        allow_budget=budget, rpc_timeout=10.0, savings_interval=0)
    try:
        c.check()
        a.mode = "unavailable"
        lost = sum(c.allow("b").degraded for _ in range(10))
        assert lost == 0, f"{lost} fallbacks at the loss"
        a.mode, a.delay = "answer", budget + 1
        # a's back-off is over: a call, with b free, has a probed in the
        # background, and the cold daemon answers the probe late.
        probed = a.calls("BatchGet")
        clock.now += SCHEDULE[0]
        c.allow("b")
        wait_for(lambda: a.calls("BatchGet") == probed + 1, "the probe at a")
        wait_for(lambda: not any(c.transport._probing), "a's late answer to the probe")
        threading.Thread(target=c.allow, args=("held",), daemon=True).start()
        wait_for(lambda: any(body.get("breaker") == "held" for _, body in b.fake.requests), "the held call at b")
        held_at = time.monotonic()
        wait_for(lambda: time.monotonic() - held_at > budget, "the held call outstanding past the Allow budget")
        allows = a.calls("Allow", "b")
        rejoin = sum(c.allow("b").degraded for _ in range(10))
        assert rejoin == 0, f"{rejoin} fallbacks at the rejoin"
        assert a.calls("Allow", "b") == allows, "no caller's Allow went to the cold daemon"
    finally:
        c.close()


def test_a_call_a_daemon_answered_past_leaves_the_client_up(caplog: pytest.LogCaptureFixture) -> None:
    """A call whose connection closed unanswered after a daemon answered
    a call begun later is no sign the daemon is gone (a daemon back from
    a stall closing the connections it had queued): the client stays up
    and says nothing. A call begun after that answer that fails the same
    way is one."""
    def handle(method: str, body: Any) -> tuple[int, str, bytes] | None:
        if method == "Record":
            fake.release.wait()
            return None
        return json_answer({})

    fake = Fake(handle)
    c = breakerd.Client(fake.url, worker_id="w1", watch=False, rpc_timeout=30.0)
    failed: list[BaseException] = []

    def record() -> None:
        try:
            c.call("Record", {"breaker": "b"})
        except Outage as e:
            failed.append(e)

    try:
        with caplog.at_level(logging.WARNING, logger="breakerd"):
            t = threading.Thread(target=record)
            t.start()
            wait_for(lambda: any(m == "Record" for m, _ in fake.requests), "the Record to reach the daemon")
            c.call("Get", {"breaker": "b"})  # answered while the Record is out
            fake.release.set()
            t.join()
            assert failed, "the Record was answered"
            assert not c.reach.down and c.reach.losses == 0, "a call begun before an answer made the client down"
            assert "answers" not in caplog.text, caplog.text
            with pytest.raises(Outage):
                c.call("Record", {"breaker": "b"})
            assert c.reach.down and c.reach.losses == 1, "a call begun after the last answer failed, and the client is up"
    finally:
        c.close()
        fake.close()
