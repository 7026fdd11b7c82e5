"""HTTP/JSON to breakerd from asyncio, on the loop's own sockets (no thread).

The same calls as ``_transport.Transport``, sent from a coroutine: an
HTTP/1.1 ``POST`` over a keep-alive connection of the running loop's
own, read by a protocol that wakes the waiting call as the answer's
bytes arrive (no reader task, no line-by-line reads, no task per
deadline). It shares the synchronous transport's knowledge of the
daemons (the one that answered last, those passed over, the rests and
the counts), so both kinds of call fail over alike, and its decoding of
an answer, so both refuse alike. Its bounds are the synchronous
transport's: the call's deadline covers connecting, sending and
reading; a line of the head is at most ``MAX_LINE`` bytes and the head
at most ``MAX_HEADERS`` lines; a body is at most ``MAX_BODY_BYTES``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import weakref
from typing import Any

from . import _otel
from ._errors import ConfigError, ProtocolError
from ._transport import _LOST, MAX_BODY_BYTES, MAX_CONNS, SERVICE_PATH, Outage, Transport, _shares

# The bounds on an answer's head: a longer line, or more lines, is not
# breakerd's.
MAX_LINE = 16 << 10
MAX_HEADERS = 100
# What one read from a connection's socket takes at most: every answer
# but a large BatchGet's fits in one.
READ_SIZE = 16 << 10

# The requests' JSON, as json.dumps(body, separators=(",", ":")) writes it,
# without making an encoder per call.
_encode = json.JSONEncoder(separators=(",", ":")).encode


class _Lost(Exception):
    """_Lost is a connection that ended before its answer began: on a
    reused connection the request may go again on a fresh one."""


class _Conn(asyncio.BufferedProtocol):
    """_Conn is one keep-alive connection, as an asyncio protocol: what the
    daemon sent is kept until the call waiting on it reads it, and that
    call is woken once per arrival. The socket is read into a buffer of
    the connection's own (a plain protocol would have each read allocate
    and free a buffer of asyncio's 256 KiB read size)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.ended = False  # the daemon closed it, or it was lost
        self._waiter: asyncio.Future[None] | None = None
        self._room = memoryview(bytearray(READ_SIZE))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment] # a stream transport: create_connection's
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._room

    def buffer_updated(self, nbytes: int) -> None:
        self.buf += self._room[:nbytes]
        self._wake()

    def eof_received(self) -> bool | None:
        self.ended = True
        self._wake()
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _expire(self, w: asyncio.Future[None]) -> None:
        if not w.done():
            w.set_exception(TimeoutError())

    @property
    def usable(self) -> bool:
        """usable is an idle connection a call may go on."""
        return not self.ended and self.transport is not None and not self.transport.is_closing() and not self.buf

    def send(self, request: bytes) -> None:
        assert self.transport is not None
        self.transport.write(request)

    async def more(self, deadline: float) -> None:
        """Waits until more bytes came, or the connection ended; raises
        TimeoutError at deadline (the loop's clock)."""
        w = self.loop.create_future()
        self._waiter = w
        timer = self.loop.call_at(deadline, self._expire, w)
        try:
            await w
        finally:
            timer.cancel()
            self._waiter = None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class _Slots:
    """_Slots are one loop's connections to one daemon: at most MAX_CONNS
    open (the synchronous transport's bound), the idle ones kept for the
    next call; a call past the bound waits for one to come free."""

    def __init__(self) -> None:
        self.idle: list[_Conn] = []
        self.open = 0  # idle and in use
        self.waiting: list[asyncio.Future[None]] = []

    def take(self) -> _Conn | None:
        """An idle connection still usable (those found unusable are closed
        on the way), or None."""
        while self.idle:
            conn = self.idle.pop()
            if conn.usable:
                return conn
            self.drop(conn)
        return None

    async def room(self, loop: asyncio.AbstractEventLoop, deadline: float, reuse: bool = True) -> _Conn | None:
        """An idle connection (unless not reuse), or None once a fresh one
        may be opened (it is counted open from then on; when a fresh one
        is wanted, an idle one is closed to make room); TimeoutError at
        deadline (the loop's clock) when neither came."""
        while True:
            conn = self.take() if reuse else None
            if conn is not None:
                return conn
            if self.open < MAX_CONNS:
                self.open += 1
                return None
            if self.idle:  # a fresh one is wanted: an idle one gives way
                self.drop(self.idle.pop(0))
                continue
            w = loop.create_future()
            self.waiting.append(w)
            timer = loop.call_at(deadline, _expire, w)
            try:
                await w
            except BaseException:
                if w.done() and not w.cancelled() and w.exception() is None:
                    self._wake()  # woken, but leaving (cancelled): the turn goes on
                raise
            finally:
                timer.cancel()
                if w in self.waiting:
                    self.waiting.remove(w)

    def put(self, conn: _Conn) -> None:
        """put keeps conn, fit for another call, for the next one."""
        self.idle.append(conn)
        self._wake()

    def drop(self, conn: _Conn) -> None:
        """drop closes conn and lets another be opened in its place."""
        conn.close()
        self.release()

    def release(self) -> None:
        """release gives back the place of a connection closed, or never
        opened."""
        self.open -= 1
        self._wake()

    def close(self) -> None:
        idle, self.idle = self.idle, []
        for conn in idle:
            self.drop(conn)

    def _wake(self) -> None:
        while self.waiting:
            w = self.waiting.pop(0)
            if not w.done():
                w.set_result(None)
                return


def _expire(w: asyncio.Future[None]) -> None:
    if not w.done():
        w.set_exception(TimeoutError())


class AsyncTransport:
    """AsyncTransport sends one JSON call to the first daemon that
    answers, from a coroutine. Connections belong to the loop that opened
    them: a call from another loop opens its own. Safe for concurrent use
    by the tasks of any loop."""

    def __init__(self, sync: Transport) -> None:
        self.sync = sync
        # Connections, by loop and daemon index.
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Slots]] = weakref.WeakKeyDictionary()
        # Each request's head up to its length and trace context, by daemon
        # index and method: the same for every call.
        self._heads: dict[tuple[int, str], bytes] = {}

    def close(self) -> None:
        """close closes every idle connection (of every loop)."""
        for pools in list(self._slots.values()):
            for slots in pools:
                slots.close()

    async def call(self, method: str, body: dict[str, Any], budget: float, started: float | None = None) -> dict[str, Any]:
        """call is Transport.call from a coroutine: the answer, Outage when
        no daemon answered within budget seconds from started (the
        synchronous transport's clock; default now), an APIError for an
        error answer, a ProtocolError for one that is not breakerd's."""
        t = self.sync
        loop = asyncio.get_running_loop()
        payload = _encode(body).encode()
        t.calls += 1
        begun = t._clock() if started is None else started
        deadline = begun + budget
        with t._lock:
            first = t._first
        order, free = t._order(first)
        n = len(order)
        last: BaseException | None = None
        for i, idx in enumerate(order):
            left = deadline - t._clock()
            if left <= 0:
                break
            url = t.endpoints[idx].url
            try:
                status, ctype, raw = await self._attempt(loop, idx, method, payload, left / _shares(i, free, n),
                                                         begun if i == 0 else None)
            except TimeoutError as e:
                last = e
                t._missed(idx, n, timed_out=True)
                continue
            except ssl.SSLCertVerificationError as e:
                raise ConfigError(f"breakerd URL {url}: TLS: {e.verify_message or e}") from e
            except (_Lost, *_LOST) as e:
                last = e
                t._missed(idx, n)
                continue
            answer = t._decode(url + SERVICE_PATH + method, status, ctype, raw)
            if answer is None:
                last = Outage(f"{url}: HTTP {status} {raw[:80].decode('utf-8', 'replace').strip()!r}")
                t._missed(idx, n)
                continue
            t._answered(idx, first)
            return answer
        within = f" within {budget:.3f}s" if isinstance(last, TimeoutError) else ""
        raise Outage(f"no breakerd answered {method}{within}: {last!r}") from last

    async def _attempt(self, loop: asyncio.AbstractEventLoop, idx: int, method: str, payload: bytes, timeout: float,
                       begun: float | None) -> tuple[int, str, bytes]:
        """One POST to daemon idx within timeout, counted as outstanding
        there meanwhile (since begun, when the caller began before now)."""
        t = self.sync
        mark = t._clock() if begun is None else begun
        with t._lock:
            t._busy[idx].append(mark)
        try:
            return await self._post(loop, idx, method, payload, loop.time() + timeout)
        except (TimeoutError, asyncio.TimeoutError):
            raise TimeoutError(f"{t.endpoints[idx].url}: no answer within {timeout:.3f}s") from None
        finally:
            with t._lock:
                t._busy[idx].remove(mark)

    def _pool(self, idx: int, loop: asyncio.AbstractEventLoop | None = None) -> _Slots:
        """The connections to daemon idx of loop (default: the running
        one)."""
        loop = loop or asyncio.get_running_loop()
        pools = self._slots.get(loop)
        if pools is None:
            pools = [_Slots() for _ in self.sync.endpoints]
            self._slots[loop] = pools
        return pools[idx]

    async def _post(self, loop: asyncio.AbstractEventLoop, idx: int, method: str, payload: bytes,
                    deadline: float) -> tuple[int, str, bytes]:
        """The POST on an idle connection, or a fresh one, answered by
        deadline (the loop's clock; TimeoutError after it); a reused one
        the daemon had closed is tried again once, fresh. On any failure,
        a cancellation included, the connection is closed."""
        url = self.sync.endpoints[idx].url
        request = self._head(idx, method, len(payload)) + payload
        slots = self._pool(idx, loop)
        conn = await slots.room(loop, deadline)
        reused = conn is not None
        if conn is None:
            conn = await self._dial(loop, idx, deadline, slots)
        for attempt in (0, 1):
            try:
                status, ctype, raw, keep = await _roundtrip(conn, url, request, deadline)
            except _Lost:
                slots.drop(conn)
                if not reused or attempt:
                    raise
                await slots.room(loop, deadline, reuse=False)
                conn, reused = await self._dial(loop, idx, deadline, slots), False
                continue
            except BaseException:
                slots.drop(conn)
                raise
            if keep:
                slots.put(conn)
            else:
                slots.drop(conn)
            return status, ctype, raw
        raise AssertionError("unreachable")

    async def _dial(self, loop: asyncio.AbstractEventLoop, idx: int, deadline: float, slots: _Slots) -> _Conn:
        """A fresh connection to daemon idx, in the place slots.room made
        for it; on any failure the place is given back."""
        ep = self.sync.endpoints[idx]
        tls: ssl.SSLContext | None = None
        if ep.https:
            tls = self.sync.tls or ssl.create_default_context()
        try:
            _, conn = await asyncio.wait_for(loop.create_connection(lambda: _Conn(loop), ep.host, ep.port, ssl=tls),
                                             max(0.0, deadline - loop.time()))
        except BaseException:
            slots.release()
            raise
        return conn

    def _head(self, idx: int, method: str, length: int) -> bytes:
        """The head of a request of length bytes to method on daemon idx:
        its fixed lines made once, then its length and the caller's trace
        context (with OpenTelemetry installed)."""
        fixed = self._heads.get((idx, method))
        if fixed is None:
            ep = self.sync.endpoints[idx]
            lines = [f"POST {ep.prefix}{SERVICE_PATH}{method} HTTP/1.1", f"Host: {ep.host}:{ep.port}"]
            lines += [f"{k}: {v}" for k, v in self.sync.static_headers().items()]
            fixed = ("\r\n".join(lines) + "\r\n").encode("latin-1")
            self._heads[(idx, method)] = fixed
        trace: dict[str, str] = {}
        _otel.inject(trace)
        if trace:
            fixed += "".join(f"{k}: {v}\r\n" for k, v in trace.items()).encode("latin-1")
        return fixed + b"Content-Length: %d\r\n\r\n" % length


async def _roundtrip(conn: _Conn, url: str, request: bytes, deadline: float) -> tuple[int, str, bytes, bool]:
    """Sends request and reads its answer by deadline: (status, content
    type, body, whether the connection may serve another call). Raises
    _Lost when the connection ended before the answer began."""
    conn.send(request)
    while True:
        got = _answer(conn.buf, url, conn.ended) if conn.buf or conn.ended else None
        if got is not None:
            status, ctype, body, keep, used = got
            del conn.buf[:used]
            return status, ctype, body, keep and not conn.ended and not conn.buf
        await conn.more(deadline)


def _answer(buf: bytearray, url: str, ended: bool) -> tuple[int, str, bytes, bool, int] | None:
    """The answer at the start of buf: (status, content type, body,
    whether the head lets the connection serve another call, bytes it
    took); None while it is incomplete and more may come (not ended)."""
    if not buf and ended:
        raise _Lost("the connection closed before an answer")
    got = _plain_head(buf)
    if got is not None:
        status, version, headers, pos = got
    else:
        head = _head_by_lines(buf, url, ended)
        if head is None:
            return None
        status, version, headers, pos = head
    keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
    body = _body(buf, pos, url, status, headers, ended)
    if body is None:
        return None
    raw, end, framed = body
    return status, headers.get("content-type", ""), raw, keep and framed, end


def _plain_head(buf: bytearray) -> tuple[int, str, dict[str, str], int] | None:
    """The head at the start of buf when it is whole and plain, read at
    once: (status, version, headers, where the body starts); None for
    any other (incomplete, over a bound, lines ended by a bare LF, a
    first line that is no status line), which _head_by_lines reads."""
    end = buf.find(b"\r\n\r\n", 0, MAX_LINE)
    if end < 0:
        return None
    head = buf[:end].decode("latin-1")
    lines = head.split("\r\n")
    if len(lines) > MAX_HEADERS + 1 or head.count("\n") != len(lines) - 1:
        return None
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(parts[1]), parts[0], headers, end + 4


def _head_by_lines(buf: bytearray, url: str, ended: bool) -> tuple[int, str, dict[str, str], int] | None:
    """The head at the start of buf read line by line, each line and the
    line count within their bounds: (status, version, headers, where the
    body starts); None while it is incomplete and more may come."""
    nl = _line_end(buf, 0, url, 0, ended)
    if nl < 0:
        return None
    status, version = _status_line(url, bytes(buf[:nl]))
    headers: dict[str, str] = {}
    pos = nl
    for _ in range(MAX_HEADERS + 1):
        nl = _line_end(buf, pos, url, status, ended)
        if nl < 0:
            return None
        line, pos = bytes(buf[pos:nl]), nl
        if line in (b"\r\n", b"\n"):
            break
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    else:
        raise ProtocolError(url, status, f"an answer's head of more than {MAX_HEADERS} lines", b"")
    return status, version, headers, pos


def _line_end(buf: bytearray, pos: int, url: str, status: int, ended: bool) -> int:
    """The end of the head's line starting at pos (past its newline); -1
    while it is incomplete and more may come."""
    nl = buf.find(b"\n", pos, pos + MAX_LINE)
    if nl >= 0:
        return nl + 1
    if len(buf) - pos >= MAX_LINE:
        raise ProtocolError(url, status, f"a line of the answer's head over {MAX_LINE} bytes", b"")
    if ended:
        raise ConnectionResetError(f"{url}: the connection closed within the answer's head")
    return -1


def _status_line(url: str, line: bytes) -> tuple[int, str]:
    parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ProtocolError(url, 0, "a first line that is not an HTTP status line", line[:200])
    return int(parts[1]), parts[0]


def _body(buf: bytearray, pos: int, url: str, status: int, headers: dict[str, str],
          ended: bool) -> tuple[bytes, int, bool] | None:
    """The body from pos as the head frames it (a length, chunks, or up to
    the close), at most MAX_BODY_BYTES: (body, its end, whether it was
    framed: a body up to the close leaves no connection); None while it
    is incomplete and more may come."""
    if status in (204, 304) or 100 <= status < 200:
        return b"", pos, True
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return _chunked(buf, pos, url, status, ended)
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise ProtocolError(url, status, f"a Content-Length of {length!r}", b"")
        n = int(length)
        if n > MAX_BODY_BYTES:
            raise ProtocolError(url, status, f"a body of {length} bytes, over the bound of {MAX_BODY_BYTES}", b"")
        if len(buf) - pos < n:
            if ended:
                raise ConnectionResetError(f"{url}: the connection closed within the answer's body")
            return None
        return bytes(buf[pos:pos + n]), pos + n, True
    if len(buf) - pos > MAX_BODY_BYTES:
        raise ProtocolError(url, status, f"a body over the bound of {MAX_BODY_BYTES} bytes", bytes(buf[pos:pos + 200]))
    if not ended:
        return None
    return bytes(buf[pos:]), len(buf), False


def _chunked(buf: bytearray, pos: int, url: str, status: int, ended: bool) -> tuple[bytes, int, bool] | None:
    out = bytearray()
    while True:
        nl = _line_end(buf, pos, url, status, ended)
        if nl < 0:
            return None
        size_line, pos = buf[pos:nl], nl
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ProtocolError(url, status, "a chunk size that is not hex", bytes(size_line[:200])) from None
        if size == 0:
            while True:  # trailers, up to the blank line
                nl = _line_end(buf, pos, url, status, ended)
                if nl < 0:
                    return None
                line, pos = bytes(buf[pos:nl]), nl
                if line in (b"\r\n", b"\n"):
                    return bytes(out), pos, True
        if len(out) + size > MAX_BODY_BYTES:
            raise ProtocolError(url, status, f"a body over the bound of {MAX_BODY_BYTES} bytes", bytes(out[:200]))
        if len(buf) - pos < size:
            if ended:
                raise ConnectionResetError(f"{url}: the connection closed within the answer's body")
            return None
        out += buf[pos:pos + size]
        nl = _line_end(buf, pos + size, url, status, ended)
        if nl < 0:
            return None
        pos = nl
