"""A daemon that hangs (accepts, answers nothing) or is slow, seen from
the client, against real daemons behind a TCP proxy of the test's own:
a hung daemon is failed over, or, when none answers, no call waits for
it any more, the loss and the return are each said once, and a breaker
last known open lets at most one call out per probe. The fake vendor's
call count and the proxy's connection count are the witnesses."""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import breakerd

from .conftest import Daemon
from .proxy import Proxy
from .test_daemon import client, trip, wait_for


@pytest.fixture
def proxies() -> Iterator[Callable[[Daemon], Proxy]]:
    made: list[Proxy] = []

    def make(d: Daemon) -> Proxy:
        made.append(Proxy(urllib.parse.urlsplit(d.url).netloc))
        return made[-1]

    yield make
    for p in made:
        p.close()


def test_a_hung_daemon_is_failed_over(two_daemons: tuple[Daemon, Daemon], proxies: Callable[[Daemon], Proxy],
                                      name: Callable[[str], str]) -> None:
    a, b = two_daemons
    hung = proxies(a)
    hung.stall()
    # A generous Allow budget: on a busy host the daemon that answers may
    # take longer than the default 50 ms, and this test means to see its answers.
    c = breakerd.Client([hung.url, b.url], worker_id="w1", watch=False, rpc_timeout=1.0, allow_budget=5.0)
    c.allow(name("x"))  # the first call finds the hung daemon
    wait_for(lambda: c.transport.failovers >= 1, "the failover to the daemon that answers")
    tried = hung.connections
    for _ in range(20):
        p = c.allow(name("x"))
        assert p.allowed and not p.degraded, "the daemon that answers answers"
    assert hung.connections == tried, "no call waits for the hung daemon again"
    assert not c.reach.down


def test_when_no_daemon_answers_calls_stop_waiting_and_it_is_said_once(
        daemon: Daemon, proxies: Callable[[Daemon], Proxy], name: Callable[[str], str],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="breakerd")
    px = proxies(daemon)
    c = breakerd.Client(px.url, worker_id="w1", watch=False, rpc_timeout=0.5)
    assert c.allow(name("x")).allowed and not c.degraded
    px.stall()
    c.allow(name("x"))
    wait_for(lambda: c.reach.down, "the daemon taken as gone after the RPC timeout")
    sent = c.transport.calls
    for _ in range(50):
        p = c.allow(name("x"))
        assert p.allowed and p.degraded
    assert c.transport.calls - sent <= 2, "allows answer from the fallback with no call (only re-probes)"
    sent = px.connections
    with pytest.raises(breakerd.BreakerdError, match="no breakerd answers"):
        c.check()  # one more call the stalled daemon does not answer: the loss is not said again
    wait_for(lambda: px.connections > sent, "check()'s connection at the stalled daemon")
    downs = [r for r in caplog.records if "no daemon at" in r.getMessage()]
    assert len(downs) == 1, [r.getMessage() for r in caplog.records]
    px.restore()
    wait_for(lambda: not c.reach.down, "the re-probe finding the daemon again")
    sent = c.transport.calls
    c.allow(name("x"))  # in time or late (a busy host), it is asked of the daemon again
    # The call goes out on the client's own thread, which on a busy host
    # may start after a late allow returned.
    wait_for(lambda: c.transport.calls == sent + 1, "the Allow sent to the daemon again")
    assert not c.reach.down
    backs = [r for r in caplog.records if "answers again" in r.getMessage()]
    assert len(backs) == 1 and len([r for r in caplog.records if "no daemon at" in r.getMessage()]) == 1
    c.close()


def test_check_fails_loudly_where_no_daemon_answers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="breakerd")
    c = breakerd.Client("http://127.0.0.1:2", worker_id="w1", watch=False)
    assert c.allow("payments").degraded  # quietly, as a fallback must
    wait_for(lambda: c.reach.down, "the loss")
    assert sum("no daemon at http://127.0.0.1:2" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(breakerd.BreakerdError, match="no breakerd answers at http://127.0.0.1:2"):
        c.check()
    c.close()


def test_check_passes_against_a_daemon(daemon: Daemon) -> None:
    c = client(daemon, worker="w1")
    c.check()


class Vendor:
    """A fake vendor: counts the calls that reach it."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def call(self) -> None:
        with self._lock:
            self.calls += 1


def test_the_half_open_herd_at_a_slow_daemon(daemon: Daemon, proxies: Callable[[Daemon], Proxy],
                                             name: Callable[[str], str]) -> None:
    b = name("vendor")
    px = proxies(daemon)
    now = [0.0]
    import time as _t
    clock: Callable[[], float] = lambda: _t.time() + now[0]  # noqa: E731 - the callers' clock, moved by the test
    callers = [breakerd.Client(px.url, worker_id=f"w{i}", watch=False, clock=clock, allow_budget=5) for i in range(10)]
    trip(b, callers[0], callers[1])
    for c in callers:
        assert not c.allow(b).allowed, "every caller has heard the trip"
        c.allow_budget = 0.05
    # The daemon slows to 150 ms past the Allow budget, and the callers'
    # clocks pass the deny-until they heard: the probe is due as far as
    # they know (the daemon, on its own clock, decides).
    px.delay = callers[0].allow_budget + 0.15
    now[0] = 15 * 60
    vendor = Vendor()

    def one(c: breakerd.Client) -> None:
        p = c.allow(b)
        if p.allowed:
            vendor.call()
            c.record(p, breakerd.HttpError(503, "vendor down"))

    threads = [threading.Thread(target=one, args=(c,)) for c in callers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert vendor.calls <= 1, f"{vendor.calls} calls at the vendor for one probe"
    for c in callers:
        c.close()


def test_no_daemon_at_a_due_probe_lets_one_call_per_client(daemon: Daemon, proxies: Callable[[Daemon], Proxy],
                                                           name: Callable[[str], str]) -> None:
    b = name("vendor")
    px = proxies(daemon)
    now = [0.0]
    import time as _t
    clock: Callable[[], float] = lambda: _t.time() + now[0]  # noqa: E731
    c = breakerd.Client(px.url, worker_id="w1", watch=False, clock=clock, rpc_timeout=0.5, allow_budget=0.5)
    trip(b, c, client(daemon, worker="w2"))
    assert not c.allow(b).allowed
    px.stall()
    now[0] = 15 * 60
    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(c.allow(b))) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(p.allowed for p in got) == 1, [p.decision for p in got]
    assert all(p.degraded for p in got)
    c.close()


def test_a_slow_daemon_still_gets_every_record(daemon: Daemon, proxies: Callable[[Daemon], Proxy],
                                               name: Callable[[str], str]) -> None:
    b = name("vendor")
    px = proxies(daemon)
    c = breakerd.Client(px.url, worker_id="w1", watch=False, allow_budget=5)
    c.allow(b)
    c.allow_budget = 0.05
    px.delay = 1.0  # far past the Allow budget, however late a busy host starts the wait
    watcher = client(daemon, worker="w2")
    for i in range(3):
        p = c.allow(b)
        assert p.allowed and p.degraded, "the fallback answered the late Allow"
        c.record(p, breakerd.HttpError(503, "vendor down"))
        wait_for(lambda: int(watcher.get(b).get("failures", 0)) == i + 1, f"record {i + 1} at the daemon")
    c.close()


def test_a_record_a_slow_daemon_applied_and_the_next_got_too_counts_once(
        two_daemons: tuple[Daemon, Daemon], proxies: Callable[[Daemon], Proxy], name: Callable[[str], str]) -> None:
    a, b = two_daemons
    slow, nxt = proxies(a), proxies(b)
    # Each daemon's share of the RPC timeout is 3 s: the next one's Record
    # is answered within it on a busy host too.
    c = breakerd.Client([slow.url, nxt.url], worker_id="w1", watch=False, rpc_timeout=6.0, allow_budget=6.0)
    watcher = client(b, worker="w2")
    try:
        p = c.allow(name("x"))
        assert p.allowed and not p.degraded
        slow.delay = 3.5  # past the slow daemon's share of the RPC timeout: the Record goes on to the next
        r = c.record(p, breakerd.HttpError(503, "vendor down"))
        assert r.get("counted") and not r.get("degraded"), f"the next daemon answered the Record: {r}"
        assert slow.methods["Record"] == 1 and nxt.methods["Record"] == 1, f"both daemons got the Record: {slow.methods} {nxt.methods} {r}"
        wait_for(lambda: int(watcher.get(name("x")).get("failures", 0)) >= 1, "the failure at the daemons")
        assert int(watcher.get(name("x")).get("failures", 0)) == 1, "one failure, however many daemons got it"
    finally:
        c.close()
        watcher.close()


def test_a_stalled_daemon_costs_at_most_the_first_allow(two_daemons: tuple[Daemon, Daemon],
                                                        proxies: Callable[[Daemon], Proxy],
                                                        name: Callable[[str], str]) -> None:
    """A daemon stalled from the start: the first Allow waits its share
    of the budget there; every later one passes it over for the daemon
    that answers, while that first call is still outstanding (no wait for
    the failover in between). The wire is the witness, not the budget (on
    a busy host the daemon that answers may answer late, and the fallback
    answers meanwhile)."""
    a, b = two_daemons
    hung, nxt = proxies(a), proxies(b)
    # The client's clock stands still: the stalled daemon's back-off never
    # ends, so no background probe adds a connection however long the
    # calls take on a busy host.
    c = breakerd.Client([hung.url, nxt.url], worker_id="w1", watch=False, allow_budget=0.2,
                        clock=lambda: 1_000_000.0)
    try:
        c.check()  # contact made: each allow waits the Allow budget, not the first-contact one
        hung.stall()
        before = nxt.methods["Allow"]
        for _ in range(20):
            c.allow(name("x"))
        wait_for(lambda: nxt.methods["Allow"] - before == 20, "every Allow at the daemon that answers")
        assert hung.connections <= 2, "a stalled daemon is not tried call after call"
    finally:
        c.close()
