"""HTTP/JSON to breakerd from asyncio, on asyncio streams (no thread).

The same calls as ``_transport.Transport``, sent from a coroutine: an
HTTP/1.1 ``POST`` over a keep-alive connection of the running loop's
own. It shares the synchronous transport's knowledge of the daemons (the
one that answered last, those passed over, the rests and the counts), so
both kinds of call fail over alike, and its decoding of an answer, so
both refuse alike. Its bounds are the synchronous transport's: the
call's deadline covers connecting, sending and reading; a line of the
head is at most ``MAX_LINE`` bytes and the head at most ``MAX_HEADERS``
lines; a body is at most ``MAX_BODY_BYTES``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import weakref
from dataclasses import dataclass
from typing import Any

from ._errors import ConfigError, ProtocolError
from ._transport import _LOST, MAX_BODY_BYTES, SERVICE_PATH, Outage, Transport

# The bounds on an answer's head: a longer line, or more lines, is not
# breakerd's.
MAX_LINE = 16 << 10
MAX_HEADERS = 100
# Idle connections kept per daemon and loop.
MAX_IDLE = 64


class _Lost(Exception):
    """_Lost is a connection that ended before its answer began: on a
    reused connection the request may go again on a fresh one."""


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        self.writer.close()


class AsyncTransport:
    """AsyncTransport sends one JSON call to the first daemon that
    answers, from a coroutine. Connections belong to the loop that opened
    them: a call from another loop opens its own. Safe for concurrent use
    by the tasks of any loop."""

    def __init__(self, sync: Transport) -> None:
        self.sync = sync
        # Idle connections, by loop and daemon index.
        self._idle: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[list[_Conn]]] = weakref.WeakKeyDictionary()

    def close(self) -> None:
        """close closes every idle connection (of every loop)."""
        for pools in list(self._idle.values()):
            for idle in pools:
                for c in idle:
                    c.close()
                idle.clear()

    async def call(self, method: str, body: dict[str, Any], budget: float, started: float | None = None) -> dict[str, Any]:
        """call is Transport.call from a coroutine: the answer, Outage when
        no daemon answered within budget seconds from started (the
        synchronous transport's clock; default now), an APIError for an
        error answer, a ProtocolError for one that is not breakerd's."""
        t = self.sync
        payload = json.dumps(body, separators=(",", ":")).encode()
        t.calls += 1
        begun = t._clock() if started is None else started
        deadline = begun + budget
        with t._lock:
            first = t._first
        order = t._order(first)
        n = len(order)
        last: BaseException | None = None
        for i, idx in enumerate(order):
            left = deadline - t._clock()
            if left <= 0:
                break
            url = t.endpoints[idx].url
            try:
                status, ctype, raw = await self._attempt(idx, method, payload, left / (n - i), begun if i == 0 else None)
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

    async def _attempt(self, idx: int, method: str, payload: bytes, timeout: float,
                       begun: float | None) -> tuple[int, str, bytes]:
        """One POST to daemon idx within timeout, counted as outstanding
        there meanwhile (since begun, when the caller began before now)."""
        t = self.sync
        mark = t._clock() if begun is None else begun
        with t._lock:
            t._busy[idx].append(mark)
        try:
            return await asyncio.wait_for(self._post(idx, method, payload), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"{t.endpoints[idx].url}: no answer within {timeout:.3f}s") from None
        finally:
            with t._lock:
                t._busy[idx].remove(mark)

    def _pool(self, idx: int) -> list[_Conn]:
        loop = asyncio.get_running_loop()
        pools = self._idle.get(loop)
        if pools is None:
            pools = [[] for _ in self.sync.endpoints]
            self._idle[loop] = pools
        return pools[idx]

    async def _post(self, idx: int, method: str, payload: bytes) -> tuple[int, str, bytes]:
        """The POST on an idle connection, or a fresh one; a reused one the
        daemon had closed is tried again once, fresh. Cancelled (the
        deadline), the connection is closed."""
        ep = self.sync.endpoints[idx]
        head = self._head(ep.prefix + SERVICE_PATH + method, f"{ep.host}:{ep.port}", len(payload))
        idle = self._pool(idx)
        reused = bool(idle)
        conn = idle.pop() if idle else await self._dial(idx)
        for attempt in (0, 1):
            try:
                status, ctype, raw, keep = await _roundtrip(conn, ep.url, head + payload)
            except _Lost:
                conn.close()
                if not reused or attempt:
                    raise
                conn, reused = await self._dial(idx), False
                continue
            except BaseException:
                conn.close()
                raise
            if keep and len(idle) < MAX_IDLE:
                idle.append(conn)
            else:
                conn.close()
            return status, ctype, raw
        raise AssertionError("unreachable")

    async def _dial(self, idx: int) -> _Conn:
        ep = self.sync.endpoints[idx]
        tls: ssl.SSLContext | None = None
        if ep.https:
            tls = self.sync.tls or ssl.create_default_context()
        reader, writer = await asyncio.open_connection(ep.host, ep.port, ssl=tls, limit=MAX_LINE)
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Conn(reader, writer)

    def _head(self, path: str, host: str, length: int) -> bytes:
        lines = [f"POST {path} HTTP/1.1", f"Host: {host}", f"Content-Length: {length}"]
        lines += [f"{k}: {v}" for k, v in self.sync.headers().items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _roundtrip(conn: _Conn, url: str, request: bytes) -> tuple[int, str, bytes, bool]:
    """Sends request and reads its answer: (status, content type, body,
    whether the connection may serve another call). Raises _Lost when the
    connection ended before the answer began."""
    try:
        conn.writer.write(request)
        await conn.writer.drain()
        first = await conn.reader.readline()
    except (ConnectionError, asyncio.IncompleteReadError) as e:
        raise _Lost(str(e)) from e
    if not first:
        raise _Lost("the connection closed before an answer")
    status, version = _status_line(url, first)
    headers = await _headers(conn.reader, url, status)
    ctype = headers.get("content-type", "")
    try:
        body = await _body(conn.reader, url, status, headers)
    except asyncio.IncompleteReadError as e:
        raise ConnectionResetError(f"{url}: the connection closed within the answer's body") from e
    keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
    return status, ctype, body, keep


def _status_line(url: str, line: bytes) -> tuple[int, str]:
    parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ProtocolError(url, 0, "a first line that is not an HTTP status line", line[:200])
    return int(parts[1]), parts[0]


async def _readline(r: asyncio.StreamReader, url: str, status: int) -> bytes:
    try:
        line = await r.readline()
    except ValueError:  # over the reader's limit (MAX_LINE)
        raise ProtocolError(url, status, f"a line of the answer's head over {MAX_LINE} bytes", b"") from None
    if not line.endswith(b"\n"):
        raise ConnectionResetError(f"{url}: the connection closed within the answer's head")
    return line


async def _headers(r: asyncio.StreamReader, url: str, status: int) -> dict[str, str]:
    out: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = await _readline(r, url, status)
        if line in (b"\r\n", b"\n"):
            return out
        k, _, v = line.decode("latin-1").partition(":")
        out[k.strip().lower()] = v.strip()
    raise ProtocolError(url, status, f"an answer's head of more than {MAX_HEADERS} lines", b"")


async def _body(r: asyncio.StreamReader, url: str, status: int, headers: dict[str, str]) -> bytes:
    """The body as the head frames it (a length, chunks, or up to the
    close), at most MAX_BODY_BYTES."""
    if status in (204, 304) or 100 <= status < 200:
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return await _chunked(r, url, status)
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise ProtocolError(url, status, f"a Content-Length of {length!r}", b"")
        if int(length) > MAX_BODY_BYTES:
            raise ProtocolError(url, status, f"a body of {length} bytes, over the bound of {MAX_BODY_BYTES}", b"")
        return await r.readexactly(int(length))
    out = await r.read(MAX_BODY_BYTES + 1)
    while out and len(out) <= MAX_BODY_BYTES:
        more = await r.read(MAX_BODY_BYTES + 1 - len(out))
        if not more:
            break
        out += more
    if len(out) > MAX_BODY_BYTES:
        raise ProtocolError(url, status, f"a body over the bound of {MAX_BODY_BYTES} bytes", out[:200])
    return out


async def _chunked(r: asyncio.StreamReader, url: str, status: int) -> bytes:
    out = bytearray()
    while True:
        size_line = await _readline(r, url, status)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ProtocolError(url, status, "a chunk size that is not hex", size_line[:200]) from None
        if size == 0:
            while (await _readline(r, url, status)) not in (b"\r\n", b"\n"):
                pass  # trailers
            return bytes(out)
        if len(out) + size > MAX_BODY_BYTES:
            raise ProtocolError(url, status, f"a body over the bound of {MAX_BODY_BYTES} bytes", bytes(out[:200]))
        out += await r.readexactly(size)
        await _readline(r, url, status)

