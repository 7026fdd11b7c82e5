"""A daemon of the fleet stopped (SIGSTOP: it accepts and never answers)
while many threads call through one client: it costs the callers at
most the Allow budget of the calls that found it, then it is passed
over; no background thread of the client is held there call after call.
The requests reaching the stopped daemon (counted at a proxy in front of
it) and the degraded answers are the witnesses."""

from __future__ import annotations

import signal
import threading
import urllib.parse
from collections.abc import Callable

import breakerd

from .conftest import Daemon
from .proxy import Proxy

THREADS = 20
CALLS = 40  # by each thread


def test_a_stopped_daemon_holds_no_thread_of_the_client(two_daemons: tuple[Daemon, Daemon],
                                                         name: Callable[[str], str]) -> None:
    a, b = two_daemons
    px = Proxy(urllib.parse.urlsplit(a.url).netloc)
    # An Allow budget that a daemon on a busy machine answers within, far
    # below the share of the RPC timeout a call waits at the stopped one.
    c = breakerd.Client([px.url, b.url], worker_id="w1", watch=False, allow_budget=1.0, rpc_timeout=10.0)
    assert a.proc is not None
    try:
        c.check()  # contact made: each Allow waits the Allow budget
        a.proc.send_signal(signal.SIGSTOP)
        sent = px.requests
        degraded = [0] * THREADS
        go = threading.Barrier(THREADS)

        def caller(i: int) -> None:
            go.wait()
            for _ in range(CALLS):
                # Answered by the client's fallback (a daemon whose own
                # Redis is slow answers degraded too).
                degraded[i] += c.allow(name("x")).local_generation is not None

        threads = [threading.Thread(target=caller, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        at_hung = px.requests - sent
        # The first call of each thread may find the stopped daemon before
        # any has been outstanding there past the Allow budget: one each
        # (20 here on a quiet machine); on a busy one, a call tries it
        # again after each rest, and answers from the live daemon may miss
        # the budget. A pool held by the stopped daemon degraded 423 of 800.
        print(f"degraded {sum(degraded)} of {THREADS * CALLS}; {at_hung} requests at the stopped daemon")
        assert at_hung <= 4 * THREADS, f"{at_hung} requests reached the stopped daemon"
        assert sum(degraded) <= THREADS * CALLS // 4, f"{sum(degraded)} of {THREADS * CALLS} calls were degraded"
    finally:
        a.proc.send_signal(signal.SIGCONT)
        c.close()
        px.close()
