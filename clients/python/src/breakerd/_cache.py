"""The open-breaker cache, fed by breakerd's Server-Sent Events.

The daemon sends, with every state that denies, the Denial it implies:
until when (``deny_until_ms``, on the Redis clock) and in which words
(the suspect worker's own in ``suspect_denial``). The cache keeps the
states that deny this worker with their Denial, and answers "does this
breaker deny now?" as a map lookup against its reading of the Redis
clock: no breaker rule lives here. The stream
(``GET /v1/watch``) opens with a snapshot of the denying breakers, then
sends each event (an event names its breaker, whose state the cache then
reads). A reconnect, to any of the daemons, sends ``Last-Event-ID``: a
stream that names its breakers replays what it missed, one that does not
starts with a fresh snapshot; a ``resync`` event starts over.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from ._denial import Denial, int64, of_state
from ._fast import FastView
from ._transport import Endpoint, Transport, _fresh

WATCH_PATH = "/v1/watch"
# The heartbeat interval assumed of a daemon that announces none (the
# daemon's default), in seconds; a stream that hears nothing (no event,
# no heartbeat) for MISSED_HEARTBEATS intervals is dropped and reconnected.
DEFAULT_HEARTBEAT = 15.0
MISSED_HEARTBEATS = 3
# How long a denial learned before the stream went quiet is still
# answered while it stays quiet (a lifted force must not deny for ever).
STALE_VIEW = 60.0
# The bounds on one line and one event of the stream, in bytes.
MAX_SSE_LINE_BYTES = 8 << 20
MAX_SSE_EVENT_BYTES = 8 << 20
_RETRY_MIN, _RETRY_MAX = 0.05, 2.0
# The bound on the Get an event triggers.
_GET_TIMEOUT = 2.0


class OpenCache:
    """OpenCache holds the breakers that deny, with a thread that follows
    the watch stream. Safe for concurrent use."""

    def __init__(self, transport: Transport, now_ms: Callable[[], int], breakers: Sequence[str] = (),
                 start: bool = True, heartbeat: float = DEFAULT_HEARTBEAT, worker_id: str = "",
                 fast: FastView | None = None) -> None:
        self._transport = transport
        self._fast = fast  # fast mode's view: told every state and event, and the stream carries run notices
        self._worker_id = worker_id  # a state's suspect_denial is this worker's own when it names it
        self.heartbeat = heartbeat  # seconds; a snapshot's heartbeat_ms replaces it
        self._parts: list[Any] = []  # a snapshot's parts read so far
        self._learned: dict[str, int] = {}  # when each denial was learned (our clock, ms)
        self._heard_ms = 0  # when the live stream was last heard
        self.following = start
        self._breakers = list(breakers)  # the stream's filter; empty: every breaker
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._denying: dict[str, tuple[dict[str, Any], Denial]] = {}
        self._offset_ms = 0  # the Redis clock minus ours, from the last as_of_ms seen
        self._last_id = ""  # the last event id seen, for Last-Event-ID
        self._live = threading.Event()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None  # the stream's socket, for close to cut
        self.snapshots = 0  # snapshots applied (tests wait on it)
        self.events = 0  # live events applied
        self.resumes = 0  # connections that sent Last-Event-ID
        self.stalls = 0  # streams dropped for their silence
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._follow, name="breakerd-watch", daemon=True)
            self._thread.start()

    # -- reading -----------------------------------------------------------

    @property
    def live(self) -> bool:
        """live says the stream is connected and its snapshot applied."""
        return self._live.is_set()

    def wait_live(self, timeout: float) -> bool:
        return self._live.wait(timeout)

    def now_redis_ms(self) -> int:
        """The cache's reading of the Redis clock."""
        return self._now_ms() + self._offset_ms

    @property
    def degraded(self) -> bool:
        """degraded says the stream is followed and not live: the view is
        what was last heard."""
        return self.following and not self._live.is_set()

    def denial(self, breaker: str, stale_ok: bool = False) -> tuple[dict[str, Any], Denial] | None:
        """denial returns the state of breaker and its Denial for this
        worker when it denies now; None otherwise. Only a live stream's
        view answers, unless stale_ok (no daemon answers: what the cache
        knew is the best left), and then, while a followed stream is not
        live, only a denial heard within STALE_VIEW."""
        if not (stale_ok or self._live.is_set()):
            return None
        with self._lock:
            known = self._denying.get(breaker)
            learned = max(self._learned.get(breaker, 0), self._heard_ms)
        if known is None or known[1].deny_until_ms <= self.now_redis_ms():
            return None
        if self.degraded and self._now_ms() - learned > STALE_VIEW * 1000:
            return None
        return known

    def known(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {name: st for name, (st, _) in self._denying.items()}

    # -- writing -----------------------------------------------------------

    def observe(self, st: dict[str, Any]) -> None:
        """observe takes one state the daemon sent (an answer or an
        event)."""
        name = st.get("breaker")
        if not isinstance(name, str) or not name:
            return
        if self._fast is not None:
            self._fast.learn(st)
        as_of = int64(st.get("as_of_ms"))
        d = of_state(st, self._worker_id)
        with self._lock:
            if as_of:
                self._offset_ms = as_of - self._now_ms()
            if d is not None and d.deny_until_ms > 0:
                self._denying[name] = (st, d)
                self._learned[name] = self._now_ms()
            else:
                self._denying.pop(name, None)
                self._learned.pop(name, None)

    def _snapshot_part(self, doc: dict[str, Any]) -> None:
        """Takes one part of the opening snapshot: the parts are gathered
        until the one without ``more: true``, which replaces the view and
        makes the stream live. A part may announce the heartbeat interval
        (``heartbeat_ms``, a number or an int64 string)."""
        hb = int64(doc.get("heartbeat_ms"))
        if hb > 0:
            self.heartbeat = hb / 1000
        states = doc.get("states", [])
        self._parts.extend(states if isinstance(states, list) else [])
        if doc.get("more") is True:
            return
        parts, self._parts = self._parts, []
        with self._lock:
            self._denying.clear()
            self._learned.clear()
        for st in parts:
            if isinstance(st, dict):
                self.observe(st)
        self.snapshots += 1
        self._heard_ms = self._now_ms()
        self._live.set()

    def apply(self, event: str, data: str, event_id: str) -> bool:
        """apply handles one SSE event; False asks for a fresh stream (a
        resync)."""
        if event == "resync":
            self._last_id = ""
            return False
        try:
            doc = json.loads(data) if data else {}
        except ValueError:
            return True
        if not isinstance(doc, dict):
            return True
        if event == "snapshot":
            self._snapshot_part(doc)
            return True
        if event_id:
            self._last_id = event_id
        if self._fast is not None and self._fast.event(doc):
            self.events += 1
            return True
        st = doc.get("state")
        if isinstance(st, dict):
            self.observe(st)
        elif "deny_until_ms" in doc:
            self.observe(doc)
        elif isinstance(doc.get("breaker"), str) and doc["breaker"]:
            self._refresh(doc["breaker"])
        self.events += 1
        return True

    def _refresh(self, breaker: str) -> None:
        """Reads the state of a breaker an event names: the event says
        what happened, the state until when it denies."""
        try:
            ans = self._transport.call("Get", {"breaker": breaker}, _GET_TIMEOUT)
        except Exception:  # the next event or snapshot tells again; an answer still in the map stays
            return
        st = ans.get("state")
        if isinstance(st, dict):
            self.observe(st)

    # -- the stream --------------------------------------------------------

    def close(self) -> None:
        self._stop.set()
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _follow(self) -> None:
        eps = self._transport.endpoints
        i, wait = 0, _RETRY_MIN
        while not self._stop.is_set():
            ep = eps[i % len(eps)]
            try:
                self._stream(ep)
                wait = _RETRY_MIN
            except (TimeoutError, socket.timeout):
                self.stalls += 1  # silent past its heartbeats: a stall
                i += 1
                wait = min(wait * 2, _RETRY_MAX)
            except (OSError, http.client.HTTPException, ValueError):
                i += 1  # the next daemon, after a pause
                wait = min(wait * 2, _RETRY_MAX)
            self._live.clear()
            self._parts = []
            self._stop.wait(wait)

    def _stream(self, ep: Endpoint) -> None:
        pool_conn = _fresh(ep, self._transport.tls, self._silence())
        try:
            headers = {k: v for k, v in self._transport.headers().items() if k == "Authorization"}
            headers["Accept"] = "text/event-stream"
            if self._last_id:
                headers["Last-Event-ID"] = self._last_id
                self.resumes += 1
            params = [("breaker", b) for b in self._breakers] + ([("run_notices", "true")] if self._fast is not None else [])
            query = "?" + urllib.parse.urlencode(params) if params else ""
            pool_conn.request("GET", ep.prefix + WATCH_PATH + query, headers=headers)
            self._sock = pool_conn.sock  # the response keeps reading it after getresponse
            if self._stop.is_set():
                return
            resp = pool_conn.getresponse()
            try:
                if resp.status != 200:
                    raise ValueError(f"watch: HTTP {resp.status}")
                self._read(resp)
            finally:
                resp.close()
        finally:
            self._sock = None
            pool_conn.close()

    def _silence(self) -> float:
        """How long the stream may hear nothing before it is dropped."""
        return MISSED_HEARTBEATS * self.heartbeat

    def _read(self, resp: http.client.HTTPResponse) -> None:
        event, eid = "", ""
        data: list[str] = []
        size = 0
        while not self._stop.is_set():
            sock = self._sock
            if sock is not None:
                sock.settimeout(self._silence())  # a snapshot may have announced another interval
            raw = resp.readline(MAX_SSE_LINE_BYTES + 1)
            if not raw:
                return
            if len(raw) > MAX_SSE_LINE_BYTES:
                raise ValueError(f"watch: a line over {MAX_SSE_LINE_BYTES} bytes; stream dropped")
            if self._live.is_set():
                self._heard_ms = self._now_ms()
            line = raw.decode("utf-8").rstrip("\r\n")
            if line == "":
                if data or event:
                    if not self.apply(event or "message", "\n".join(data), eid):
                        return
                event, data, eid, size = "", [], "", 0
                continue
            if line.startswith(":"):
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                event = value
            elif key == "data":
                size += len(value) + 1
                if size > MAX_SSE_EVENT_BYTES:
                    raise ValueError(f"watch: an event over {MAX_SSE_EVENT_BYTES} bytes; stream dropped")
                data.append(value)
            elif key == "id":
                eid = value
