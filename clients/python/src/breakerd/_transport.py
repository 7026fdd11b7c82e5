"""HTTP/JSON to one or several breakerd daemons, over keep-alive.

Each call is a ``POST /breakerd.v1.BreakerService/<Method>`` with a JSON
body (the proto3 JSON mapping). The transport tries the daemons in turn,
starting with the last one that answered, until one answers or the
call's budget is spent. A refused, reset or lost connection moves on to
the next daemon at once; a daemon that does not answer within its share
of the budget (the budget divided among the daemons left; one passed
over, below, gets only what the others leave) is left for the next,
which later calls then try first. A daemon with a call
outstanding longer than ``skip_after`` (the Allow budget) is tried after
the others. So is one that did not answer (refused, silent, or
Unavailable), until it answers again: while another daemon answers, no
call of a caller tries it; after its back-off (``_reach.backoff``, on the
back-off clock) a probe in the background asks it, and only a probe
answered within ``skip_after`` takes it back. A paused daemon costs at
most the call that found it, and one back from a restart, cold, costs no
call its budget. When
no daemon answered in time the call raises ``Outage``, which the client
turns into a degraded answer. Anything else a daemon answers that is not
a success is an exception naming what is wrong (``_errors``).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import _otel
from ._reach import backoff
from ._errors import (
    APIError,
    ConfigError,
    FieldViolation,
    InvalidArgument,
    PermissionDenied,
    ProtocolError,
    Unauthenticated,
)

SERVICE_PATH = "/breakerd.v1.BreakerService/"
# The bound on one answer's body: breakerd's largest (a BatchGet of 1,024
# states) is well within it; a longer one is not breakerd's.
MAX_BODY_BYTES = 4 << 20
_CHUNK = 64 << 10

# Error codes that mean "this daemon cannot answer now", so another daemon
# or the fallback may: an outage, not a mistake of the caller's.
_OUTAGE_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})

# The gateway statuses a proxy answers for a daemon it cannot reach: with
# a body that is not breakerd's JSON error, that daemon is away.
_GATEWAY = frozenset({502, 503, 504})



class Outage(Exception):
    """Outage is no daemon answering within the budget (internal: the
    client answers from its fallback instead)."""


@dataclass(frozen=True)
class Endpoint:
    """Endpoint is one daemon's base URL, parsed."""

    url: str
    https: bool
    host: str
    port: int
    prefix: str

    @staticmethod
    def parse(url: str) -> Endpoint:
        try:
            u = urllib.parse.urlsplit(url)
            port = u.port
        except ValueError as e:
            raise ConfigError(f"breakerd URL {url!r}: {e}") from None
        if u.scheme not in ("http", "https"):
            raise ConfigError(f"breakerd URL {url!r}: the scheme must be http or https, not {u.scheme!r}")
        if not u.hostname:
            raise ConfigError(f"breakerd URL {url!r}: no host")
        if u.query or u.fragment or u.username or u.password:
            raise ConfigError(f"breakerd URL {url!r}: no query, fragment or credentials (pass token=)")
        https = u.scheme == "https"
        return Endpoint(url, https, u.hostname, port or (443 if https else 80), u.path.rstrip("/"))


def parse_urls(urls: str | Sequence[str]) -> list[Endpoint]:
    """parse_urls accepts one URL, a comma-separated list, or a sequence."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    eps = [Endpoint.parse(u.strip()) for u in items if u.strip()]
    if not eps:
        raise ConfigError("breakerd URLs: none given")
    return eps


# The bound on connections to one daemon, idle ones and those in use: a
# call past it waits for one to come free (within its budget) rather than
# open another, so a daemon that stalls holds at most this many of a
# client's connections, however many calls time out meanwhile.
MAX_CONNS = 64


class _Pool:
    """The connections to one endpoint: at most MAX_CONNS open, the idle
    ones kept alive for the next call. Safe for concurrent use (a
    connection is used by one call at a time)."""

    def __init__(self, ep: Endpoint, tls: ssl.SSLContext | None) -> None:
        self.ep = ep
        self.tls = tls
        self.cond = threading.Condition()
        self.idle: list[http.client.HTTPConnection] = []
        self.open = 0  # idle and in use

    def get(self, timeout: float, reuse: bool = True) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection (unless not reuse), or a fresh one once fewer
        than MAX_CONNS are open (when a fresh one is wanted, an idle one
        is closed to make room); TimeoutError when neither comes within
        timeout seconds. The second result says whether it was idle."""
        deadline = time.monotonic() + timeout
        spare: http.client.HTTPConnection | None = None
        with self.cond:
            while not (reuse and self.idle) and self.open >= MAX_CONNS:
                if self.idle:  # a fresh one is wanted: an idle one gives way
                    spare = self.idle.pop(0)
                    self.open -= 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.ep.url}: all {MAX_CONNS} connections busy for {timeout:.3f}s")
                self.cond.wait(left)
            if reuse and self.idle:
                conn = self.idle.pop()
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                return conn, True
            self.open += 1
        if spare is not None:
            spare.close()
        return _fresh(self.ep, self.tls, timeout), False

    def put(self, conn: http.client.HTTPConnection) -> None:
        """put keeps conn, fit for another call, for the next one."""
        with self.cond:
            self.idle.append(conn)
            self.cond.notify()

    def drop(self, conn: http.client.HTTPConnection) -> None:
        """drop closes conn and lets another be opened in its place."""
        conn.close()
        with self.cond:
            self.open -= 1
            self.cond.notify()

    def close(self) -> None:
        with self.cond:
            idle, self.idle = self.idle, []
            self.open -= len(idle)
            self.cond.notify_all()
        for c in idle:
            c.close()


# The errors that mean a connection was refused, reset or lost: the
# daemon did not answer, so another one may.
_LOST = (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine, ssl.SSLEOFError, OSError)


def _shares(i: int, free: int, n: int) -> int:
    """How many ways the budget left is shared at the i-th daemon of n
    tried, the first free ones free: among the free daemons left, so that
    one passed over gets only what they leave (a slow daemon that answers
    never hands half its budget to one that did not); then among the
    passed over left."""
    return free - i if i < free else n - i


class Transport:
    """Transport sends one JSON call to the first daemon that answers."""

    def __init__(
        self,
        urls: str | Sequence[str],
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
        skip_after: float = float("inf"),
        backoff_clock: Callable[[], float] = time.monotonic,
        probe: tuple[str, dict[str, Any]] = ("BatchGet", {"breakers": []}),
        probe_timeout: float = 2.0,
    ) -> None:
        self.endpoints = parse_urls(urls)
        self.skip_after = skip_after  # a call outstanding this long passes its daemon over
        self.tls = tls
        self._pools = [_Pool(ep, tls) for ep in self.endpoints]
        self._token = token
        self._clock = clock
        self._lock = threading.Lock()
        self._first = 0  # the daemon that answered last
        self._busy: list[list[float]] = [[] for _ in self.endpoints]  # when each outstanding call began, by daemon
        # A daemon that did not answer is tried last until a probe finds it
        # again: its failures in a row, and when it is probed next (on
        # backoff_clock).
        self._strikes = [0 for _ in self.endpoints]
        self._due = [0.0 for _ in self.endpoints]
        self._probing = [False for _ in self.endpoints]
        self._backoff_clock = backoff_clock
        self._probe_call = probe
        self.probe_timeout = probe_timeout
        self.probes = 0  # background probes sent (tests read it)
        self.failovers = 0  # calls answered by another daemon than the first tried
        self.calls = 0  # calls sent (the wire count tests read)

    def close(self) -> None:
        for p in self._pools:
            p.close()

    def headers(self) -> dict[str, str]:
        h = self.static_headers()
        _otel.inject(h)  # the caller's traceparent, with OpenTelemetry installed
        return h

    def static_headers(self) -> dict[str, str]:
        """static_headers are the headers of every request, all but its
        trace context."""
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._token:
            h["Authorization"] = "Bearer " + self._token
        return h

    def call(self, method: str, body: dict[str, Any], budget: float, started: float | None = None) -> dict[str, Any]:
        """call POSTs body to method on the first daemon that answers
        within budget seconds and returns the decoded answer. started is
        when the caller began waiting (this transport's clock), if before
        now. Raises Outage when none does, an APIError for an error
        answer, and a ProtocolError for an answer that is not breakerd's."""
        payload = json.dumps(body, separators=(",", ":")).encode()
        self.calls += 1
        begun = self._clock() if started is None else started
        deadline = begun + budget
        with self._lock:
            first = self._first
        order, free = self._order(first)
        n = len(order)
        last: BaseException | None = None
        for i, idx in enumerate(order):
            left = deadline - self._clock()
            if left <= 0:
                break
            try:
                # Each daemon left gets its share of the budget: a hung
                # one must not keep the call from the next.
                status, ctype, raw = self._attempt(idx, method, payload, left / _shares(i, free, n), begun if i == 0 else None)
            except (TimeoutError, socket.timeout) as e:
                last = e
                self._missed(idx, n, timed_out=True)
                continue
            except ssl.SSLCertVerificationError as e:
                # Not an outage: this client's TLS settings do not trust
                # the daemon, and no fallback fixes that.
                raise ConfigError(f"breakerd URL {self._pools[idx].ep.url}: TLS: {e.verify_message or e}") from e
            except _LOST as e:
                last = e
                self._missed(idx, n)
                continue
            answer = self._decode(self._pools[idx].ep.url + SERVICE_PATH + method, status, ctype, raw)
            if answer is None:  # the daemon, or a proxy in front of it, says it cannot answer now
                last = Outage(f"{self._pools[idx].ep.url}: HTTP {status} {raw[:80].decode('utf-8', 'replace').strip()!r}")
                self._missed(idx, n)
                continue
            self._answered(idx, first)
            return answer
        within = f" within {budget:.3f}s" if isinstance(last, (TimeoutError, socket.timeout)) else ""
        raise Outage(f"no breakerd answered {method}{within}: {last!r}") from last

    def _order(self, first: int) -> tuple[list[int], int]:
        """The daemons in the order to try, from first on, and how many
        of them are free: those passed over (a call outstanding past
        skip_after, or one that did not answer and has not answered a
        probe since) come last. While another daemon is free, a daemon
        that did not answer is probed in the background once its back-off
        is over."""
        n = len(self._pools)
        if n == 1:
            return [0], 1  # nothing to order, none to probe: a lone daemon's share is the whole budget either way
        now = self._clock()
        free: list[int] = []
        passed: list[int] = []
        with self._lock:
            for idx in ((first + i) % n for i in range(n)):
                stuck = any(now - t >= self.skip_after for t in self._busy[idx])
                (passed if stuck or self._strikes[idx] else free).append(idx)
            due = [i for i in passed if self._strikes[i] and not self._probing[i]
                   and self._backoff_clock() >= self._due[i]] if free else []
            for idx in due:
                self._probing[idx] = True
                self.probes += 1
        for idx in due:
            threading.Thread(target=self._probe, args=(idx,), name="breakerd-probe", daemon=True).start()
        return free + passed, len(free)

    def _missed(self, idx: int, n: int, timed_out: bool = False) -> None:
        """Daemon idx did not answer a call: it is struck, and one that
        timed out as the first tried no longer starts the next calls."""
        with self._lock:
            self._strike(idx)
            if timed_out and self._first == idx:
                self._first = (idx + 1) % n

    def _answered(self, idx: int, first: int) -> None:
        """Daemon idx answered a call that started at first: it starts
        the next calls."""
        with self._lock:
            self._strikes[idx] = 0
            if idx != first:
                self.failovers += 1
            self._first = idx

    def _strike(self, idx: int) -> None:
        """A call daemon idx did not answer (self._lock held)."""
        self._strikes[idx] += 1
        self._due[idx] = self._backoff_clock() + backoff(self._strikes[idx])

    def _probe(self, idx: int) -> None:
        """One probe of daemon idx: an answer within skip_after takes it
        back (any answer, a refusal included: the daemon is there)."""
        method, body = self._probe_call
        began = self._clock()
        ok = False
        try:
            status, ctype, raw = self._attempt(idx, method, json.dumps(body).encode(), self.probe_timeout, None)
            ok = self._decode(self._pools[idx].ep.url, status, ctype, raw) is not None
        except APIError:
            ok = True
        except Exception:  # refused, silent, not breakerd: still away
            ok = False
        ok = ok and self._clock() - began <= self.skip_after
        with self._lock:
            if ok:
                self._strikes[idx] = 0
            else:
                self._strike(idx)
            self._probing[idx] = False

    def _attempt(self, idx: int, method: str, payload: bytes, timeout: float,
                 begun: float | None) -> tuple[int, str, bytes]:
        """One POST to daemon idx, counted as outstanding there meanwhile
        (since begun, when the caller began waiting before now)."""
        t = self._clock() if begun is None else begun
        with self._lock:
            self._busy[idx].append(t)
        try:
            return self._post(self._pools[idx], method, payload, timeout)
        finally:
            with self._lock:
                self._busy[idx].remove(t)

    def _post(self, pool: _Pool, method: str, payload: bytes, timeout: float) -> tuple[int, str, bytes]:
        deadline = self._clock() + timeout
        path = pool.ep.prefix + SERVICE_PATH + method
        conn, reused = pool.get(timeout)
        try:
            status, ctype, raw, keep = self._roundtrip(conn, path, payload, deadline)
        except (TimeoutError, socket.timeout):
            pool.drop(conn)
            raise
        except _LOST:
            pool.drop(conn)
            if not reused:
                raise
            # An idle keep-alive connection the daemon had closed: the
            # request never reached it, so a fresh connection may retry.
            conn, _ = pool.get(max(0.001, deadline - self._clock()), reuse=False)
            try:
                status, ctype, raw, keep = self._roundtrip(conn, path, payload, deadline)
            except BaseException:
                pool.drop(conn)
                raise
        except BaseException:
            pool.drop(conn)
            raise
        if keep:
            pool.put(conn)
        else:
            pool.drop(conn)
        return status, ctype, raw

    def _roundtrip(self, conn: http.client.HTTPConnection, path: str, payload: bytes,
                   deadline: float) -> tuple[int, str, bytes, bool]:
        conn.request("POST", path, body=payload, headers=self.headers())
        sock = conn.sock  # a response read to the connection's close takes it from conn
        resp = conn.getresponse()
        try:
            raw = _read_body(f"{conn.host}:{conn.port}", sock, resp, deadline, self._clock)
        except BaseException:
            resp.close()
            if sock is not None:
                sock.close()
            raise
        return resp.status, resp.getheader("Content-Type", "") or "", raw, not resp.will_close

    def _decode(self, url: str, status: int, ctype: str, raw: bytes) -> dict[str, Any] | None:
        """The answer's JSON, an exception for an error answer, or None
        for an answer saying this daemon cannot answer now."""
        if "json" not in ctype.lower():
            if status in (401, 403):
                cls = Unauthenticated if status == 401 else PermissionDenied
                text = raw[:200].decode("utf-8", "replace").strip()
                raise cls("UNAUTHENTICATED" if status == 401 else "PERMISSION_DENIED", text, status=status, url=url)
            if status in _GATEWAY:
                return None  # a proxy's gateway error: the daemon behind it is away
            raise ProtocolError(url, status, f"Content-Type {ctype or 'none'!r}", raw)
        try:
            doc = json.loads(raw)
        except ValueError:
            if status in _GATEWAY:
                return None
            raise ProtocolError(url, status, "a body that is not JSON", raw) from None
        if not isinstance(doc, dict):
            if status in _GATEWAY:
                return None
            raise ProtocolError(url, status, "JSON that is not an object", raw)
        if status == 200:
            return doc
        code = str(doc.get("code", "")).upper()
        if not code:
            if status in _GATEWAY:
                return None
            raise ProtocolError(url, status, "an error without a code", raw)
        if code in _OUTAGE_CODES:
            return None
        raise _api_error(code, str(doc.get("message", "")), status, url, doc)


def _read_body(url: str, sock: socket.socket | None, resp: http.client.HTTPResponse, deadline: float,
               clock: Callable[[], float]) -> bytes:
    """The answer's body, read by chunks within the call's deadline (each
    read waits at most what is left of it) and at most MAX_BODY_BYTES: a
    server that streams without end is cut off, never read whole."""
    length = resp.getheader("Content-Length")
    if length and length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise ProtocolError(url, resp.status, f"a body of {length} bytes, over the bound of {MAX_BODY_BYTES}", b"")
    out = bytearray()
    while True:
        if resp.isclosed() or resp.length == 0:
            resp.close()  # read to its end: the connection may serve the next call
            return bytes(out)
        left = deadline - clock()
        if left <= 0:
            raise TimeoutError(f"{url}: the answer's body did not arrive within the call's deadline")
        if sock is not None:
            sock.settimeout(left)
        chunk = resp.read1(_CHUNK)
        if not chunk:
            return bytes(out)
        out += chunk
        if len(out) > MAX_BODY_BYTES:
            raise ProtocolError(url, resp.status, f"a body over the bound of {MAX_BODY_BYTES} bytes", bytes(out[:200]))


def _fresh(ep: Endpoint, tls: ssl.SSLContext | None, timeout: float) -> http.client.HTTPConnection:
    if ep.https:
        return http.client.HTTPSConnection(ep.host, ep.port, timeout=timeout, context=tls)
    return http.client.HTTPConnection(ep.host, ep.port, timeout=timeout)


def _violations(doc: dict[str, Any]) -> list[FieldViolation]:
    out: list[FieldViolation] = []
    raw = doc.get("field_violations", doc.get("violations", []))
    if isinstance(raw, list):
        for v in raw:
            if isinstance(v, dict):
                out.append(FieldViolation(str(v.get("field", "")), str(v.get("description", ""))))
    return out


def _api_error(code: str, message: str, status: int, url: str, doc: dict[str, Any]) -> APIError:
    cls: type[APIError] = {
        "INVALID_ARGUMENT": InvalidArgument,
        "UNAUTHENTICATED": Unauthenticated,
        "PERMISSION_DENIED": PermissionDenied,
    }.get(code, APIError)
    if status == 401:
        cls = Unauthenticated
    elif status == 403:
        cls = PermissionDenied
    return cls(code, message, status=status, url=url, violations=_violations(doc))
