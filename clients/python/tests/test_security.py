"""Security: what a hostile or broken server reached as a daemon URL can
make the client do. No answer or stream grows the process past its
bounds, and no call outlives its deadline however the bytes trickle."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import breakerd
from breakerd._cache import MAX_SSE_LINE_BYTES
from breakerd._transport import MAX_BODY_BYTES, Outage

from .fakes import RawServer


class Hostile(RawServer):
    """A TCP server that answers every connection with head, then calls
    feed(send) until the client hangs up; counts what it sent."""

    def __init__(self, head: bytes, feed: Callable[[Callable[[bytes], None]], None]) -> None:
        self.head, self.feed = head, feed
        self.sent = 0
        self.hung_up = threading.Event()
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)

            def send(b: bytes) -> None:
                conn.sendall(b)
                self.sent += len(b)

            try:
                send(self.head)
                self.feed(send)
            except OSError:
                self.hung_up.set()


def endless(chunk: bytes) -> Callable[[Callable[[bytes], None]], None]:
    def feed(send: Callable[[bytes], None]) -> None:
        while True:
            send(chunk)

    return feed


@pytest.fixture
def hostile() -> Iterator[list[Hostile]]:
    made: list[Hostile] = []
    yield made
    for h in made:
        h.close()


def test_security_an_answer_is_read_up_to_its_bound_only(hostile: list[Hostile]) -> None:
    """N7: a hostile URL streamed 2.9 GB into one get()."""
    h = Hostile(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n", endless(b"a" * 65536))
    hostile.append(h)
    c = breakerd.Client(h.url, worker_id="w1", rpc_timeout=60, watch=False)
    with pytest.raises(breakerd.ProtocolError, match=f"over the bound of {MAX_BODY_BYTES} bytes"):
        c.get("payments")
    assert h.hung_up.wait(30), "the client hung up"
    assert h.sent < 4 * MAX_BODY_BYTES, f"the server sent {h.sent} bytes before the client hung up"


def test_security_a_trickled_answer_ends_at_the_call_deadline(hostile: list[Hostile]) -> None:
    """N7: 30.9 s despite rpc_timeout=2: each read waited its own timeout."""

    def trickle(send: Callable[[bytes], None]) -> None:
        while True:
            send(b" ")
            time.sleep(0.01)

    h = Hostile(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n", trickle)
    hostile.append(h)
    c = breakerd.Client(h.url, worker_id="w1", rpc_timeout=0.3, watch=False)
    with pytest.raises(Outage):
        c.get("payments")
    assert h.hung_up.wait(30), "the client hung up at its deadline"


def test_security_a_watch_line_is_bounded(hostile: list[Hostile]) -> None:
    """N7: the watch thread grew to 287 MB on one endless line."""
    h = Hostile(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: ", endless(b"x" * 65536))
    hostile.append(h)
    c = breakerd.Client(h.url, worker_id="w1", watch=True)
    try:
        assert h.hung_up.wait(30), "the stream was dropped"
        assert h.sent < 4 * MAX_SSE_LINE_BYTES
        for _ in range(3000):
            if h.connections >= 2:
                break
            time.sleep(0.01)
        assert h.connections >= 2, "the stream reconnects"
    finally:
        c.close()
