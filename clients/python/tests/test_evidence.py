"""What each library's exceptions become as evidence: the libraries are
the real ones (pinned in requirements-test.txt), their exceptions made by
the libraries themselves from real sockets or real response objects."""

from __future__ import annotations

import asyncio
import email.message
import socket
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import aiohttp
import anthropic
import httpx
import httpx2
import openai
import pytest
import requests
from multidict import CIMultiDict, CIMultiDictProxy

import breakerd
from breakerd._evidence import evidence_of

DEAD = "http://127.0.0.1:1/"  # nothing listens on port 1: refused at once
NOWHERE = "http://breakerd-test.invalid/"  # .invalid never resolves (RFC 6761)


@pytest.fixture
def silent() -> Iterator[str]:
    """A server that accepts and never answers: a read timeout."""
    srv = socket.create_server(("127.0.0.1", 0))
    conns: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                conns.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}/"
    stop.set()
    t.join()
    for c in conns:
        c.close()
    srv.close()


@pytest.fixture
def not_tls() -> Iterator[str]:
    """A server that answers a TLS handshake with plain text."""
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.1)
        while not stop.is_set():
            try:
                c = srv.accept()[0]
            except OSError:
                continue
            c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\nthis is not TLS\r\n" * 4)
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"https://127.0.0.1:{srv.getsockname()[1]}/"
    stop.set()
    t.join()
    srv.close()


def raised(fn: object, *args: object, **kwargs: object) -> BaseException:
    try:
        fn(*args, **kwargs)  # type: ignore[operator]
    except BaseException as e:  # noqa: BLE001 - the point is to catch it
        return e
    raise AssertionError(f"{fn} raised nothing")


RATE_HEADERS = {"Retry-After": "120", "Date": "Wed, 21 Oct 2026 07:28:00 GMT", "Set-Cookie": "secret=1",
                "x-ratelimit-reset-requests": "6m0s"}
WANT_429 = {"http_status": 429, "headers": {"retry-after": "120", "x-ratelimit-reset-requests": "6m0s"},
            "date": "Wed, 21 Oct 2026 07:28:00 GMT"}


# -- statuses -----------------------------------------------------------------


def test_requests_status() -> None:
    r = requests.Response()
    r.status_code, r.url = 429, "http://vendor/"
    r.headers.update(RATE_HEADERS)
    r._content = b'{"error":{"code":"insufficient_quota","message":"pay"}}'
    assert evidence_of(raised(r.raise_for_status)) == {**WANT_429, "body_error_code": "insufficient_quota"}


def test_httpx_status() -> None:
    r = httpx.Response(503, headers={"Retry-After": "7"}, request=httpx.Request("GET", "http://vendor/"),
                       content=b"<html>down</html>")
    assert evidence_of(raised(r.raise_for_status)) == {"http_status": 503, "headers": {"retry-after": "7"}}


def test_urllib_status() -> None:
    h = email.message.Message()
    for k, v in RATE_HEADERS.items():
        h[k] = v
    e = urllib.error.HTTPError("http://vendor/", 429, "Too Many Requests", h, None)
    assert evidence_of(e) == WANT_429


def test_aiohttp_status() -> None:
    info = aiohttp.RequestInfo(aiohttp.client_reqrep.URL("http://vendor/"), "GET", CIMultiDictProxy(CIMultiDict()))
    e = aiohttp.ClientResponseError(info, (), status=429, headers=CIMultiDictProxy(CIMultiDict(RATE_HEADERS)))
    assert evidence_of(e) == WANT_429


def test_openai_status() -> None:
    resp = httpx.Response(429, headers=RATE_HEADERS, request=httpx.Request("POST", "https://api.openai.com/v1/x"))
    body = {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}
    e = openai.RateLimitError("quota", response=resp, body=body)
    assert evidence_of(e) == {**WANT_429, "body_error_code": "insufficient_quota"}


def test_anthropic_status() -> None:
    resp = httpx2.Response(529, headers={"retry-after": "30"}, request=httpx2.Request("POST", "https://api.anthropic.com/v1/messages"))
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    e = anthropic.APIStatusError("overloaded", response=resp, body=body)
    assert evidence_of(e) == {"http_status": 529, "headers": {"retry-after": "30"}, "body_error_code": "overloaded_error"}


def test_wrapped_status() -> None:
    """A tool's own exception raised from a library's keeps its status."""
    r = httpx.Response(500, request=httpx.Request("GET", "http://vendor/"))
    try:
        try:
            r.raise_for_status()
        except httpx.HTTPStatusError as inner:
            raise RuntimeError("lookup failed") from inner
    except RuntimeError as e:
        assert evidence_of(e) == {"http_status": 500}


# -- errors without a response -------------------------------------------------


@pytest.mark.parametrize("kind,url", [("ERROR_KIND_REFUSED", DEAD), ("ERROR_KIND_DNS", NOWHERE)])
def test_connection_errors(kind: str, url: str) -> None:
    assert evidence_of(raised(requests.get, url, timeout=5)) == {"error_kind": kind}
    assert evidence_of(raised(httpx.get, url, timeout=5)) == {"error_kind": kind}
    assert evidence_of(raised(urllib.request.urlopen, url, timeout=5)) == {"error_kind": kind}

    async def aio() -> BaseException:
        async with aiohttp.ClientSession() as s:
            try:
                await s.get(url, timeout=aiohttp.ClientTimeout(total=5))
            except BaseException as e:  # noqa: BLE001
                return e
        raise AssertionError("no error")

    assert evidence_of(asyncio.run(aio())) == {"error_kind": kind}


def test_openai_connection_error() -> None:
    c = openai.OpenAI(api_key="test", base_url=DEAD, max_retries=0)
    e = raised(c.models.list)
    assert isinstance(e, openai.APIConnectionError)
    assert evidence_of(e) == {"error_kind": "ERROR_KIND_REFUSED"}


def test_timeouts(silent: str) -> None:
    assert evidence_of(raised(requests.get, silent, timeout=0.05)) == {"error_kind": "ERROR_KIND_TIMEOUT"}
    assert evidence_of(raised(httpx.get, silent, timeout=0.05)) == {"error_kind": "ERROR_KIND_TIMEOUT"}
    assert evidence_of(raised(urllib.request.urlopen, silent, timeout=0.05)) == {"error_kind": "ERROR_KIND_TIMEOUT"}
    c = anthropic.Anthropic(api_key="test", base_url=silent, max_retries=0, timeout=0.05)
    e = raised(c.models.list)
    assert isinstance(e, anthropic.APITimeoutError)
    assert evidence_of(e) == {"error_kind": "ERROR_KIND_TIMEOUT"}


def test_tls(not_tls: str) -> None:
    ctx = ssl.create_default_context()
    assert evidence_of(raised(requests.get, not_tls, timeout=5)) == {"error_kind": "ERROR_KIND_TLS"}
    assert evidence_of(raised(httpx.get, not_tls, timeout=5)) == {"error_kind": "ERROR_KIND_TLS"}
    assert evidence_of(raised(urllib.request.urlopen, not_tls, timeout=5, context=ctx)) == {"error_kind": "ERROR_KIND_TLS"}


def test_cancel_and_interrupt() -> None:
    assert evidence_of(asyncio.CancelledError()) == {"error_kind": "ERROR_KIND_CANCELLED"}
    assert evidence_of(KeyboardInterrupt()) == {"error_kind": "ERROR_KIND_CANCELLED"}


def test_inner_denial() -> None:
    """A tool whose sub-tool was denied by breakerd: never the outer
    dependency's failure, even wrapped."""
    inner = breakerd.CircuitOpen(breaker="geo", decision="DECISION_DENIED_OPEN", reason="down", retry_after_ms=1, tool_result="{}")
    assert evidence_of(inner) == {"error_kind": "ERROR_KIND_BREAKERD_DENIAL"}
    try:
        try:
            raise inner
        except breakerd.CircuitOpen as e:
            raise ValueError("could not geocode") from e
    except ValueError as outer:
        assert evidence_of(outer) == {"error_kind": "ERROR_KIND_BREAKERD_DENIAL"}


def test_malformed_and_other() -> None:
    assert evidence_of(breakerd.MalformedOutput("no 'id' field")) == {"error_kind": "ERROR_KIND_MALFORMED_OUTPUT"}
    assert evidence_of(ValueError("bug")) == {"error_kind": "ERROR_KIND_OTHER"}
    assert evidence_of(None) == {}


def test_unrecognised_errors_are_other() -> None:
    """A tool's own bug says nothing the classifier recognises: never a
    transport kind, even when its message or a wrapped one mentions one."""
    assert evidence_of(KeyError("symbol")) == {"error_kind": "ERROR_KIND_OTHER"}
    assert evidence_of(ValueError("unknown symbol ZZZ; connection refused")) == {"error_kind": "ERROR_KIND_OTHER"}
    try:
        try:
            {}["ZZZ"]
        except KeyError as inner:
            raise ValueError("unknown symbol") from inner
    except ValueError as e:
        assert evidence_of(e) == {"error_kind": "ERROR_KIND_OTHER"}


# -- HttpError and raise_for_status ----------------------------------------------


def test_http_error_keeps_its_status() -> None:
    e = breakerd.HttpError(503, "payments down", headers={"Retry-After": "7", "Set-Cookie": "s=1"},
                           body={"error": {"code": "overloaded"}})
    assert evidence_of(e) == {"http_status": 503, "headers": {"retry-after": "7"}, "body_error_code": "overloaded"}
    try:
        try:
            raise breakerd.HttpError(408)
        except breakerd.HttpError as inner:
            raise RuntimeError("lookup failed") from inner
    except RuntimeError as outer:
        assert evidence_of(outer) == {"http_status": 408}
    for bad in (0, 99, 600, True, "503"):
        with pytest.raises(ValueError, match="status"):
            breakerd.HttpError(bad)  # type: ignore[arg-type]


def test_raise_for_status_of_each_library() -> None:
    """requests' and httpx's responses, read as they are (the JSON body
    already read gives the code), and any object with a status."""
    r = requests.Response()
    r.status_code, r.url = 429, "http://vendor/"
    r.headers.update(RATE_HEADERS)
    r._content = b'{"error":{"code":"insufficient_quota"}}'
    e = raised(breakerd.raise_for_status, r)
    assert isinstance(e, breakerd.HttpError) and e.status_code == 429 and e.response is r
    assert evidence_of(e) == {**WANT_429, "body_error_code": "insufficient_quota"}

    x = httpx.Response(503, headers={"Retry-After": "7"}, request=httpx.Request("GET", "http://vendor/"))
    e = raised(breakerd.raise_for_status, x)
    assert "HTTP 503" in str(e) and "http://vendor/" in str(e)
    assert evidence_of(e) == {"http_status": 503, "headers": {"retry-after": "7"}}

    class Reply:  # aiohttp's and urllib's responses name it status
        status = 404
        headers = {"Content-Type": "text/plain"}

    assert evidence_of(raised(breakerd.raise_for_status, Reply())) == {"http_status": 404}
    ok = httpx.Response(204, request=httpx.Request("GET", "http://vendor/"))
    assert breakerd.raise_for_status(ok) is ok
    with pytest.raises(TypeError, match="status"):
        breakerd.raise_for_status(object())
