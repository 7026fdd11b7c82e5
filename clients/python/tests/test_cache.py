"""The open cache on the watch stream's wire format (docs/http-api.md), as
a scripted server sends it: a snapshot, an event that names a breaker
(whose state the cache then reads), heartbeats, a reconnect that sends
Last-Event-ID, a resync that starts over. test_daemon runs it against
real daemons."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from breakerd._cache import OpenCache
from breakerd._transport import Transport


def wait_for(cond: Callable[[], bool], what: str) -> None:
    end = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.005)


class Streams:
    """Serves one scripted stream per connection; each script is a list
    of SSE texts, sent in order (an empty text waits for ``more``); the
    stream then ends (or, for the last script, stays open until closed)."""

    def __init__(self, scripts: list[list[str]], states: dict[str, dict[str, Any]]) -> None:
        self.scripts, self.states = scripts, states
        self.last_ids: list[str | None] = []
        self.gets: list[str] = []
        self.done = threading.Event()
        self.more = threading.Event()
        srv = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the stream closes

            def do_GET(self) -> None:
                n = len(srv.last_ids)
                srv.last_ids.append(self.headers.get("Last-Event-ID"))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for text in srv.scripts[min(n, len(srv.scripts) - 1)]:
                    if not text:
                        srv.more.wait(30)
                        continue
                    self.wfile.write(text.encode())
                    self.wfile.flush()
                if n >= len(srv.scripts) - 1:
                    srv.done.wait()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                srv.gets.append(body["breaker"])
                raw = json.dumps({"state": srv.states[body["breaker"]]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *a: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.done.set()
        self.more.set()
        self.server.shutdown()
        self.server.server_close()


NOW = 1_800_000_000_000


def denial(until: int, **kw: Any) -> dict[str, Any]:
    return {"decision": "DECISION_DENIED_OPEN", "scope": "DENIAL_SCOPE_BREAKER", "deny_until_ms": str(until),
            "may_return_at_ms": str(until), "reason": "it is failing", "status": "circuit_open", **kw}


def state(name: str, until: int) -> dict[str, Any]:
    st = {"breaker": name, "state": "STATE_OPEN" if until else "STATE_CLOSED", "as_of_ms": str(NOW),
          "deny_until_ms": str(until)}
    if until:
        st["denial"] = denial(until)
    return st


def sse(event: str, data: Any, eid: str = "") -> str:
    head = f"id: {eid}\n" if eid else ""
    return head + f"event: {event}\ndata: {json.dumps(data)}\n\n"


@pytest.fixture
def streams() -> Iterator[Streams]:
    s = Streams(
        [
            [": heartbeat\n\n", sse("snapshot", {"states": [state("b1", NOW + 60_000)]}),
             sse("event", {"breaker": "b2", "kind": "EVENT_KIND_TRANSITION", "to": "STATE_OPEN"}, "b2/1800000000000-0"),
             ": heartbeat\n\n"],
            ["event: resync\ndata: {\"reason\":\"the feed was lost\"}\n\n"],
            [sse("snapshot", {"states": [state("b3", NOW + 1_000)]})],
        ],
        {"b2": state("b2", NOW + 30_000)},
    )
    yield s
    s.close()


def test_stream(streams: Streams) -> None:
    clock = [NOW]
    cache = OpenCache(Transport([streams.url]), lambda: clock[0])
    try:
        # First stream: the snapshot, then an event whose state is read.
        wait_for(lambda: len(streams.last_ids) >= 2, "the reconnect")
        assert streams.gets == ["b2"]
        assert streams.last_ids[:2] == [None, "b2/1800000000000-0"]
        assert cache.resumes >= 1
        # After the resync: a fresh stream, no Last-Event-ID, the new
        # snapshot replaces what was known.
        wait_for(lambda: cache.known().keys() == {"b3"}, "the fresh snapshot")
        assert streams.last_ids[2] is None
        assert cache.live
        known = cache.denial("b3")
        assert known is not None and known[0]["breaker"] == "b3" and known[1].status == "circuit_open"
        clock[0] = NOW + 1_000  # deny_until_ms reached: a map lookup says no more
        assert cache.denial("b3") is None
    finally:
        cache.close()


def test_not_live_answers_only_when_stale_is_asked_for() -> None:
    cache = OpenCache(Transport(["http://127.0.0.1:1"]), lambda: NOW, start=False)
    cache.observe(state("b", NOW + 5_000))
    assert cache.denial("b") is None  # no live stream: not trusted for a round trip saved
    assert cache.denial("b", stale_ok=True) is not None  # an outage: the best left
    cache.observe(state("b", 0))
    assert cache.denial("b", stale_ok=True) is None


def test_clock_offset_from_as_of() -> None:
    """deny_until_ms is on the Redis clock: the cache reads it through the
    offset of the last as_of_ms."""
    local = [NOW - 10_000]  # this machine is 10 s behind Redis
    cache = OpenCache(Transport(["http://127.0.0.1:1"]), lambda: local[0], start=False)
    cache.observe(state("b", NOW + 5_000))
    assert cache.now_redis_ms() == NOW
    local[0] += 5_000
    assert cache.denial("b", stale_ok=True) is None


def test_suspect_denial_is_the_suspects_own() -> None:
    """A state sent to many carries the suspect worker's denial: the
    cache of that worker keeps it, any other worker's does not."""
    st = state("b", 0)
    st.update(suspect_worker="w1", suspect_until_ms=str(NOW + 5_000),
              suspect_denial=denial(NOW + 5_000, decision="DECISION_DENIED_SUSPECT_WORKER",
                                    scope="DENIAL_SCOPE_WORKER", status="worker_isolated"))
    caches = {w: OpenCache(Transport(["http://127.0.0.1:1"]), lambda: NOW, start=False, worker_id=w) for w in ("w1", "w2")}
    for c in caches.values():
        c.observe(st)
    own = caches["w1"].denial("b", stale_ok=True)
    assert own is not None and own[1].status == "worker_isolated" and own[1].scope_word == "worker"
    assert caches["w2"].denial("b", stale_ok=True) is None
    st["denial"] = denial(NOW + 9_000)  # the fleet's, once the breaker opens too
    caches["w2"].observe(st)
    fleet = caches["w2"].denial("b", stale_ok=True)
    assert fleet is not None and fleet[1].status == "circuit_open"


def test_a_denying_state_without_a_denial_is_not_kept() -> None:
    """The words come from the daemon: a state that sends none is left to
    the daemon's Allow."""
    cache = OpenCache(Transport(["http://127.0.0.1:1"]), lambda: NOW, start=False)
    st = state("b", NOW + 5_000)
    del st["denial"]
    cache.observe(st)
    assert cache.denial("b", stale_ok=True) is None
