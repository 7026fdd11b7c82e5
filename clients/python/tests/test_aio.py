"""The asyncio client on its own transport, against real daemons: many
tasks' Allows and Records in flight at once hold no thread (the threads
alive while a proxy holds every answer are the witness) and at most a
connection each, a hung daemon is failed over, an Allow past its budget
is the fallback's; against scripted servers, an answer is read however
it is framed and cut, and the bounds on an answer are the synchronous
transport's."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator

import httpx
import pytest

import breakerd
from breakerd._aiotransport import MAX_LINE, AsyncTransport
from breakerd._errors import ProtocolError
from breakerd._transport import MAX_BODY_BYTES, Outage, Transport

from .conftest import Daemon
from .fakes import Fake
from .proxy import Proxy

TASKS = 32


@pytest.fixture
def proxy(daemon: Daemon) -> Iterator[Proxy]:
    p = Proxy(urllib.parse.urlsplit(daemon.url).netloc)
    yield p
    p.close()


def client_threads() -> set[str]:
    """The threads a client could lend a call: asyncio's default executor
    (asyncio.to_thread) and the client's own background pool. One left by
    an earlier test may end meanwhile: only a new one is a thread lent."""
    return {t.name for t in threading.enumerate() if t.name.startswith(("asyncio_", "breakerd-call"))}


async def in_flight(proxy: Proxy, base: int, n: int) -> set[str]:
    """The client's threads once n more requests than base are in flight
    (the proxy holds each answer back)."""
    while proxy.requests < base + n:
        await asyncio.sleep(0.01)
    return client_threads()


def test_tasks_in_flight_hold_no_thread(proxy: Proxy, name: Callable[[str], str]) -> None:
    async def main() -> None:
        async with breakerd.AsyncClient(proxy.url, worker_id="aio-1", watch=False, allow_budget=30.0) as c:
            b = name("x")
            await c.allow(b)  # first contact, and the breaker's policy
            before = client_threads()
            proxy.delay = 1.0
            base = proxy.requests
            tasks = [asyncio.ensure_future(c.allow(b)) for _ in range(TASKS)]
            during = await in_flight(proxy, base, TASKS)
            permits = await asyncio.gather(*tasks)
            assert all(p.allowed and not p.degraded for p in permits)
            assert not during - before, f"threads {sorted(during - before)} lent to {TASKS} Allows in flight"
            assert proxy.connections <= TASKS + 1, f"{proxy.connections} connections for {TASKS} Allows in flight"
            opened = proxy.connections
            base = proxy.requests
            recs = [asyncio.ensure_future(c.record(p)) for p in permits]
            during = await in_flight(proxy, base, TASKS)
            assert all(not r.get("degraded") for r in await asyncio.gather(*recs))
            assert not during - before, f"threads {sorted(during - before)} lent to {TASKS} Records in flight"
            assert proxy.connections == opened, "the Records went on the Allows' kept-alive connections"
            assert proxy.methods["Allow"] == TASKS + 1 and proxy.methods["Record"] == TASKS

    asyncio.run(main())


def test_async_guard_trips_and_denies(daemon: Daemon, name: Callable[[str], str]) -> None:
    b = name("payments")

    async def fail(c: breakerd.AsyncClient) -> None:
        with pytest.raises(httpx.HTTPStatusError):
            async with c.guard(b, tool="refund_charge"):
                httpx.Response(503, request=httpx.Request("POST", "http://vendor/")).raise_for_status()

    async def main() -> None:
        async with breakerd.AsyncClient(daemon.url, worker_id="aio-w1", watch=False, allow_budget=5.0) as c1, \
                breakerd.AsyncClient(daemon.url, worker_id="aio-w2", watch=False, allow_budget=5.0) as c2:
            sent = c1.sync.transport.calls + c2.sync.transport.calls
            for c in (c1, c2, c1):
                await fail(c)
            assert c1.sync.transport.calls + c2.sync.transport.calls > sent, "the calls went over the shared count"
            p = await c2.allow(b)
            assert not p.allowed and p.decision == "DECISION_DENIED_OPEN" and "issue_refund_manually" in p.tool_result
            with pytest.raises(breakerd.CircuitOpen):
                async with c2.guard(b):
                    pytest.fail("a denied call ran")

    asyncio.run(main())


def test_a_hung_daemon_is_failed_over(two_daemons: tuple[Daemon, Daemon], name: Callable[[str], str]) -> None:
    a, b = two_daemons
    hung = Proxy(urllib.parse.urlsplit(a.url).netloc)
    hung.stall()

    async def main() -> None:
        async with breakerd.AsyncClient([hung.url, b.url], worker_id="aio-h", watch=False, rpc_timeout=1.0,
                                        allow_budget=5.0) as c:
            await c.allow(name("x"))  # the first call finds the hung daemon
            assert c.sync.transport.failovers >= 1
            tried = hung.connections
            for _ in range(10):
                p = await c.allow(name("x"))
                assert p.allowed and not p.degraded
            assert hung.connections == tried, "no call waits for the hung daemon again"

    try:
        asyncio.run(main())
    finally:
        hung.close()


def test_an_allow_past_its_budget_is_the_fallbacks(proxy: Proxy, name: Callable[[str], str]) -> None:
    async def main() -> None:
        async with breakerd.AsyncClient(proxy.url, worker_id="aio-b", watch=False, allow_budget=0.2,
                                        first_contact_budget=5.0) as c:
            b = name("x")
            await c.allow(b)
            proxy.stall()
            p = await c.allow(b)
            assert p.allowed and p.degraded and p.local_generation is not None
            proxy.restore()

    asyncio.run(main())


def test_an_answer_that_is_not_http() -> None:
    """A first line that is no HTTP status line is a ProtocolError that
    says so, with no HTTP status in its text (there is none)."""
    srv = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{srv.getsockname()[1]}"

    def answer() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    th = threading.Thread(target=answer, daemon=True)
    th.start()
    try:
        with pytest.raises(ProtocolError) as e:
            asyncio.run(AsyncTransport(Transport(url)).call("Get", {"breaker": "x"}, 5.0))
        assert e.value.status == 0 and "HTTP 0" not in str(e.value)
        assert str(e.value).startswith(f"{url} answered a first line that is not an HTTP status line, not breakerd's JSON")
    finally:
        th.join(10)
        srv.close()


def test_bounds_on_an_answer() -> None:
    huge = b"x" * (MAX_BODY_BYTES + 1)
    f = Fake(lambda _m, _b: (200, "application/json", huge))
    try:
        t = AsyncTransport(Transport(f.url))
        with pytest.raises(ProtocolError, match="over the bound"):
            asyncio.run(t.call("Get", {"breaker": "x"}, 5.0))
    finally:
        f.close()

    async def refused() -> None:
        await AsyncTransport(Transport("http://127.0.0.1:2")).call("Get", {"breaker": "x"}, 1.0)

    with pytest.raises(Outage):
        asyncio.run(refused())


def test_an_answer_framed_every_way_and_in_pieces() -> None:
    """Chunks (with a trailer) and a Content-Length, each sent a few bytes
    at a time, keep the connection for the next call; a body that ends
    with the connection does not."""
    srv = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{srv.getsockname()[1]}"
    doc = b'{"state":{"breaker":"x"}}'
    chunked = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\n" + doc[:5] + b"\r\n" + f"{len(doc) - 5:x}".encode() + b";ext=1\r\n" + doc[5:] + b"\r\n"
               b"0\r\nX-Trailer: 1\r\n\r\n")
    length = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(doc), doc)
    to_close = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + doc
    connections: list[int] = []

    def answer() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return  # closed: the test is over
            connections.append(1)
            with conn:
                for a in (chunked, length, to_close):
                    if not conn.recv(65536):
                        break
                    for i in range(0, len(a), 7):
                        conn.sendall(a[i:i + 7])
                        time.sleep(0.001)

    th = threading.Thread(target=answer, daemon=True)
    th.start()

    async def main() -> None:
        t = AsyncTransport(Transport(url))
        for _ in range(3):
            assert await t.call("Get", {"breaker": "x"}, 5.0) == {"state": {"breaker": "x"}}
        slots = t._pool(0)
        assert not slots.idle and slots.open == 0, "a body up to the close leaves no connection to keep"

    try:
        asyncio.run(main())
        assert len(connections) == 1, "the chunked and the sized answers kept the connection"
    finally:
        srv.close()
        th.join(10)


def test_an_idle_connection_the_daemon_closed_is_retried() -> None:
    f = Fake(lambda _m, _b: (200, "application/json", b"{}"))
    f.drop_idle = True

    async def main() -> None:
        t = AsyncTransport(Transport(f.url))
        for _ in range(3):
            assert await t.call("Get", {"breaker": "x"}, 5.0) == {}

    try:
        asyncio.run(main())
        assert len(f.requests) == 3 and f.connections == 3, (f.requests, f.connections)
    finally:
        f.close()


def test_a_line_of_the_head_over_its_bound() -> None:
    srv = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{srv.getsockname()[1]}"

    def answer() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * (MAX_LINE + 10) + b"\r\n\r\n")
            conn.recv(65536)

    th = threading.Thread(target=answer, daemon=True)
    th.start()
    try:
        with pytest.raises(ProtocolError, match="a line of the answer's head over"):
            asyncio.run(AsyncTransport(Transport(url)).call("Get", {"breaker": "x"}, 5.0))
    finally:
        th.join(10)
        srv.close()
