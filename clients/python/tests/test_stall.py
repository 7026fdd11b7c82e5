"""The watch stream that stalls: a server of the test's own stands where
the daemon would, announces a short heartbeat interval, and keeps the
stream open with nothing on it. The client drops it after three silent
intervals, is degraded meanwhile, reconnects, and a force lifted during
the stall stops denying. A snapshot in parts replaces the view once."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import breakerd

FOREVER = "9223372036854775807"


def part(states: list[Any], **extra: Any) -> bytes:
    return b"event: snapshot\ndata: " + json.dumps({"states": states, **extra}).encode() + b"\n\n"


class Streams:
    """Serves GET /v1/watch: connection n writes script[n] (the last
    entry for any later one), then holds the connection until released."""

    def __init__(self, script: list[list[bytes]]) -> None:
        self.script = script
        self.connections = 0
        self.release = threading.Event()
        self.more = threading.Event()  # a script entry of b"" waits on it
        srv = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                n = srv.connections
                srv.connections += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in srv.script[min(n, len(srv.script) - 1)]:
                    if chunk == b"":
                        srv.more.wait(30)
                        continue
                    self.wfile.write(chunk)
                    self.wfile.flush()
                srv.release.wait(30)
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.more.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def streams() -> Iterator[Callable[[list[list[bytes]]], Streams]]:
    made: list[Streams] = []

    def make(script: list[list[bytes]]) -> Streams:
        made.append(Streams(script))
        return made[-1]

    yield make
    for s in made:
        s.close()


def wait_for(cond: Callable[[], bool], what: str) -> None:
    for _ in range(3000):
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_stalled_stream_is_dropped_after_three_silent_intervals(streams: Callable[..., Streams]) -> None:
    now = [1_700_000_000.0]
    forced = {"breaker": "pinned", "state": "STATE_FORCED_OPEN", "forced_by": "ops", "deny_until_ms": FOREVER,
              "as_of_ms": str(int(now[0] * 1000))}
    s = streams([
        [part([forced], heartbeat_ms="50", more=True), part([], heartbeat_ms="50")],  # then silence: a stall
        [part([], heartbeat_ms=50)],  # the force was lifted meanwhile
    ])
    c = breakerd.Client(s.url, worker_id="w1", clock=lambda: now[0])
    try:
        wait_for(lambda: c.cache.snapshots >= 1, "the first snapshot")
        assert c.cache.denial("pinned") is not None, "both parts make the view"
        assert c.cache.heartbeat == 0.05, "the announced interval, from an int64 string"
        wait_for(lambda: s.connections >= 2, "the reconnect after the stall")
        assert c.cache.stalls == 1
        wait_for(lambda: c.cache.snapshots >= 2, "the fresh snapshot")
        assert c.cache.denial("pinned") is None, "the lifted force no longer denies"
        assert not c.degraded
    finally:
        c.close()


def test_a_snapshot_in_parts_replaces_the_view_when_its_last_part_arrives(streams: Callable[..., Streams]) -> None:
    def open_(b: str) -> dict[str, Any]:
        return {"breaker": b, "state": "STATE_OPEN", "deny_until_ms": str(int(time.time() * 1000) + 600_000)}

    s = streams([[part([open_("a")], more=True), b"", part([open_("b")], more=False)]])
    c = breakerd.Client(s.url, worker_id="w1", watch_heartbeat=60)
    try:
        c.cache.observe(open_("old"))
        wait_for(lambda: s.connections == 1, "the stream")
        assert c.cache.snapshots == 0 and not c.cache.live
        assert c.degraded, "degraded while the followed stream is not live"
        s.more.set()
        wait_for(lambda: c.cache.snapshots == 1, "the last part")
        assert c.cache.denial("a") is not None and c.cache.denial("b") is not None
        assert c.cache.denial("old") is None, "the complete snapshot replaced the view"
        assert not c.degraded
    finally:
        c.close()


def test_a_view_no_longer_heard_denies_for_a_bounded_time(streams: Callable[..., Streams]) -> None:
    now = [1_700_000_000.0]
    s = streams([[]])  # headers, never a snapshot
    c = breakerd.Client(s.url, worker_id="w1", clock=lambda: now[0], watch_heartbeat=60)
    try:
        c.cache.observe({"breaker": "pinned", "state": "STATE_FORCED_OPEN", "deny_until_ms": FOREVER})
        assert c.cache.denial("pinned", stale_ok=True) is not None
        now[0] += 60.001
        assert c.cache.denial("pinned", stale_ok=True) is None, "not heard for STALE_VIEW: no longer denies"
    finally:
        c.close()
