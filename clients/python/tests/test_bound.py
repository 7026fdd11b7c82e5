"""A lone daemon that stalls (accepts, reads, never answers) while the
calls sent to it time out: the client holds at most MAX_CONNS
connections to it at once, from threads and from asyncio tasks, however
many calls went past their budget. The stalled server's count of the
connections open at once is the witness."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest

import breakerd
from breakerd._aiotransport import _Conn, _Slots
from breakerd._transport import MAX_CONNS, Endpoint, _Pool

from .fakes import RawServer

CALLS = 3 * MAX_CONNS


class Stalled(RawServer):
    """Stalled reads each connection to its end, answering nothing, and
    counts the connections open at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open = self.most = 0
        self.conns: list[socket.socket] = []
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        with self.lock:
            self.open += 1
            self.most = max(self.most, self.open)
            self.conns.append(conn)
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass
        with self.lock:
            self.open -= 1

    def close(self) -> None:
        super().close()
        with self.lock:
            conns, self.conns = self.conns, []
        for c in conns:
            c.close()


@pytest.fixture
def stalled() -> Iterator[Stalled]:
    s = Stalled()
    yield s
    s.close()


def client(url: str) -> breakerd.Client:
    # Each Allow answers from the fallback after its budget; its request
    # stays out, for a late answer, up to an RPC timeout no test reaches.
    return breakerd.Client(url, worker_id="w1", watch=False, allow_budget=0.02, first_contact_budget=0.02,
                           rpc_timeout=60.0)


def test_threads_hold_at_most_the_bound_of_a_stalled_daemons_connections(stalled: Stalled) -> None:
    c = client(stalled.url)
    try:
        def caller(n: int) -> None:
            for _ in range(n):
                assert c.allow("search").degraded
        threads = [threading.Thread(target=caller, args=(CALLS // 8,)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(f"{stalled.connections} connections accepted, at most {stalled.most} open at once")
        assert stalled.most <= MAX_CONNS, f"{stalled.most} connections open at once at the stalled daemon"
        assert stalled.most == MAX_CONNS, f"{CALLS} calls left out opened only {stalled.most}"
    finally:
        stalled.close()
        c.close()


def test_tasks_hold_at_most_the_bound_of_a_stalled_daemons_connections(stalled: Stalled) -> None:
    async def main() -> None:
        c = breakerd.AsyncClient.of(client(stalled.url))
        try:
            permits = await asyncio.gather(*(c.allow("search") for _ in range(CALLS)))
            assert all(p.degraded for p in permits)
            # The requests left out dial on the loop after their callers
            # had the fallback's answer: wait until the bound's are in.
            for _ in range(6000):
                if stalled.connections >= MAX_CONNS:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)  # room for any past the bound to arrive too
            print(f"{stalled.connections} connections accepted, at most {stalled.most} open at once")
            assert stalled.most <= MAX_CONNS, f"{stalled.most} connections open at once at the stalled daemon"
            assert stalled.most == MAX_CONNS, f"{CALLS} calls left out opened only {stalled.most}"
        finally:
            stalled.close()
            await c.close()

    asyncio.run(main())


class Open:
    """A transport that stays open (a kept connection's, without a socket)."""

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


def test_a_fresh_connection_wanted_at_the_bound_closes_an_idle_one() -> None:
    """A retry wants a fresh connection: with MAX_CONNS open and idle, one
    of them gives way rather than the retry waiting out its budget."""
    pool = _Pool(Endpoint.parse("http://127.0.0.1:1"), None)
    conns = [pool.get(1.0)[0] for _ in range(MAX_CONNS)]
    for c in conns:
        pool.put(c)
    fresh, reused = pool.get(0.001, reuse=False)
    assert not reused and fresh not in conns
    assert pool.open == MAX_CONNS and len(pool.idle) == MAX_CONNS - 1

    async def main() -> None:
        slots = _Slots()
        loop = asyncio.get_running_loop()
        for _ in range(MAX_CONNS):
            assert await slots.room(loop, loop.time() + 1.0) is None
        for _ in range(MAX_CONNS):
            conn = _Conn(loop)
            conn.transport = Open()  # type: ignore[assignment]
            slots.put(conn)
        assert await slots.room(loop, loop.time() + 0.001, reuse=False) is None
        assert slots.open == MAX_CONNS and len(slots.idle) == MAX_CONNS - 1

    asyncio.run(main())
