"""What a tool call raised, as the evidence breakerd classifies.

The client never decides whether a failure counts: it reports what it saw
(an HTTP status, the headers that say how long to wait, the response's
date, the body's error code, or a kind of error), and the daemon's one
table classifies it. Exceptions are read by duck typing, so that the
client imports none of the libraries it understands: requests, httpx,
urllib, aiohttp, and the OpenAI and Anthropic SDKs' status errors.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from ._denial import data
from ._errors import CircuitOpen, InvalidArgument
from ._limits import Rule, check

# Evidence is the JSON object sent as RecordRequest's evidence.
Evidence = dict[str, Any]
R = TypeVar("R")

# The error kinds this module reports: breakerd.v1.ErrorKind's names, as
# the proto3 JSON mapping writes an enum.
KIND_DNS = "ERROR_KIND_DNS"
KIND_TLS = "ERROR_KIND_TLS"
KIND_REFUSED = "ERROR_KIND_REFUSED"
KIND_RESET = "ERROR_KIND_RESET"
KIND_TIMEOUT = "ERROR_KIND_TIMEOUT"
KIND_CANCELLED = "ERROR_KIND_CANCELLED"
KIND_MALFORMED = "ERROR_KIND_MALFORMED_OUTPUT"
KIND_DENIAL = "ERROR_KIND_BREAKERD_DENIAL"
KIND_OTHER = "ERROR_KIND_OTHER"

# The error kinds by number (breakerd.v1.ErrorKind).
_ERROR_KINDS = ("ERROR_KIND_UNSPECIFIED", KIND_DNS, KIND_TLS, KIND_REFUSED, KIND_RESET, KIND_TIMEOUT, KIND_CANCELLED,
                KIND_MALFORMED, KIND_DENIAL, KIND_OTHER)
# The highest gRPC status code (16, UNAUTHENTICATED; classify.MaxGRPCStatus).
_MAX_GRPC_STATUS = 16
_INTEGER = re.compile(r"-?[0-9]{1,19}")


def _integer(v: Any, lo: int, hi: int) -> bool:
    """Whether v is an integer of the proto3 JSON mapping (a number, or a
    str of one) from lo to hi."""
    if isinstance(v, str) and _INTEGER.fullmatch(v):
        v = int(v)
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _known_kind(v: Any) -> bool:
    """Whether v is an ErrorKind, by name or number."""
    return v in _ERROR_KINDS if isinstance(v, str) else _integer(v, 0, len(_ERROR_KINDS) - 1)


# EVIDENCE_FIELDS is what each CallEvidence field must be in the proto3
# JSON mapping (proto/breakerd/v1/breaker.proto). The daemon checks the
# rest: a header's syntax, the date's format, the lengths
# (classify.Validate).
EVIDENCE_FIELDS: dict[str, Rule] = {
    "http_status": Rule("0 (no HTTP response) or an HTTP status from 100 to 599", (int, str),
                        lambda v: _integer(v, 0, 0) or _integer(v, 100, 599)),
    "headers": Rule("a mapping of header names to str values", Mapping,
                    lambda v: all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())),
    "date": Rule("a str (an HTTP-date)", str),
    "body_error_code": Rule("a str", str),
    "grpc_status": Rule(f"a gRPC status code from 0 to {_MAX_GRPC_STATUS}", (int, str),
                        lambda v: _integer(v, 0, _MAX_GRPC_STATUS)),
    "grpc_retry_delay_ms": Rule("a whole number of ms, 0 or more", (int, str), lambda v: _integer(v, 0, 2**63 - 1)),
    "error_kind": Rule("an ErrorKind name (ERROR_KIND_TIMEOUT, ...) or number", (str, int), _known_kind),
    "no_deadline": Rule("True or False", bool),
}


def check_evidence(ev: object) -> None:
    """check_evidence raises InvalidArgument naming the field
    ("evidence.http_status") for evidence given to record that breakerd
    would refuse by its shape: not a mapping, a field CallEvidence has
    not, a value of the wrong type or out of its range."""
    if not isinstance(ev, Mapping):
        raise InvalidArgument.refused("evidence", f"must be a mapping of CallEvidence fields, got {type(ev).__name__}")
    for k, v in ev.items():
        rule = EVIDENCE_FIELDS.get(k)
        if rule is None:
            raise InvalidArgument.refused(f"evidence.{k}", f"is not a CallEvidence field ({', '.join(EVIDENCE_FIELDS)})")
        check(f"evidence.{k}", rule, v)


# The header names (lower-cased) and prefixes breakerd reads for how long
# to wait (conformance/client_rules.json); no other header leaves the
# process (cookies, request ids and the like).
_RULES = data("client_rules.json")
_WAIT_HEADERS = frozenset(str(h) for h in _RULES["wait_headers"])
_WAIT_PREFIXES = tuple(str(p) for p in _RULES["wait_header_prefixes"])
# CallEvidence's bounds.
_MAX_HEADERS = 32
_MAX_HEADER_VALUE = 256
_MAX_CODE = 64


class MalformedOutput(Exception):
    """MalformedOutput marks a call whose dependency answered with output
    the tool's validator rejected: a counted failure
    (``error_kind: malformed_output``). Raise it from a guarded call."""


class HttpError(Exception):
    """HttpError is a dependency's HTTP error answer, raised by a tool
    that got one (``raise_for_status`` raises it): its ``status_code`` is
    sent as the evidence's ``http_status``, its wait headers and its JSON
    body's error code with it, so the daemon classifies the answer, not an
    unknown error. ``headers`` is any mapping of response headers, ``body``
    the decoded JSON body if there is one."""

    def __init__(self, status: int, message: str = "", *, headers: Mapping[str, str] | None = None,
                 body: object = None, response: object = None) -> None:
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise ValueError(f"status: must be an HTTP status from 100 to 599, got {status!r}")
        self.status_code = status
        self.headers: Mapping[str, str] = dict(headers or {})
        self.body = body
        self.response = response
        super().__init__(message or f"HTTP {status}")


def raise_for_status(response: R) -> R:
    """raise_for_status raises HttpError for a response whose status is
    400 or more and returns any other as it is. The response is duck
    typed: its status is ``status_code`` (requests, httpx), else
    ``status`` (aiohttp, urllib), and its headers ``headers``; a JSON body
    already read (requests, httpx) gives the error code. No HTTP library
    is imported."""
    status = _status_of(response)
    if status is None:
        raise TypeError(f"raise_for_status: {type(response).__name__} has no integer status_code or status")
    if status < 400:
        return response
    headers = _header_map(getattr(response, "headers", None))
    reason = getattr(response, "reason_phrase", None) or getattr(response, "reason", None)
    text = f"HTTP {status}" + (f" {reason}" if isinstance(reason, str) and reason else "")
    url = getattr(response, "url", None)
    if url is not None:
        text += f" from {url}"
    raise HttpError(status, text, headers=headers, body=_loaded_json(response), response=response)


def _status_of(h: object) -> int | None:
    for attr in ("status_code", "status", "code"):
        v = getattr(h, attr, None)
        if isinstance(v, int) and not isinstance(v, bool) and 100 <= v <= 599:
            return v
    return None


def is_cancel(exc: BaseException) -> bool:
    """is_cancel says whether exc is the caller giving up (asyncio's
    cancellation, Ctrl-C): such a call says nothing of the dependency."""
    return isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt))


def evidence_of(exc: BaseException | None) -> Evidence:
    """evidence_of returns the evidence for what a call raised: ``{}`` for
    a success (None), an HTTP status with its wait headers, date and error
    code when the exception carries a response, a gRPC status, else an
    ``error_kind``."""
    if exc is None:
        return {}
    if is_cancel(exc):
        return {"error_kind": KIND_CANCELLED}
    if isinstance(exc, CircuitOpen):
        return {"error_kind": KIND_DENIAL}
    if isinstance(exc, MalformedOutput):
        return {"error_kind": KIND_MALFORMED}
    for e in _chain(exc):
        if isinstance(e, CircuitOpen):
            return {"error_kind": KIND_DENIAL}
        ev = _http_evidence(e) or _grpc_evidence(e)
        if ev:
            return ev
    return {"error_kind": _kind(exc)}


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and what it wraps: causes, contexts, urllib's and
    urllib3's ``reason``, and exceptions passed as arguments (requests
    wraps urllib3's errors so), each once, breadth first."""
    seen: set[int] = set()
    queue: list[BaseException] = [exc]
    while queue and len(seen) < 32:
        e = queue.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        inner: list[object] = [e.__cause__, e.__context__, getattr(e, "reason", None)]
        inner.extend(e.args if isinstance(e.args, tuple) else ())
        queue.extend(i for i in inner if isinstance(i, BaseException))


def _status(e: BaseException) -> int | None:
    """The HTTP status an exception carries, from its own attributes or
    its response's."""
    for h in (e, getattr(e, "response", None)):
        status = None if h is None else _status_of(h)
        if status is not None:
            return status
    return None


def _http_evidence(e: BaseException) -> Evidence:
    status = _status(e)
    if status is None:
        return {}
    ev: Evidence = {"http_status": status}
    headers = _headers(e)
    wait = {k: v for k, v in headers.items() if is_wait_header(k)}
    if wait:
        ev["headers"] = dict(list(wait.items())[:_MAX_HEADERS])
    if "date" in headers:
        ev["date"] = headers["date"]
    code = _error_code(e)
    if code:
        ev["body_error_code"] = code
    return ev


def _grpc_evidence(e: BaseException) -> Evidence:
    """A grpc.RpcError's status code (its ``code()`` is a StatusCode
    whose value is ``(int, name)``)."""
    code = getattr(e, "code", None)
    if not callable(code):
        return {}
    try:
        value = getattr(code(), "value", None)
    except Exception:
        return {}
    if isinstance(value, tuple) and value and isinstance(value[0], int):
        return {"grpc_status": value[0]}
    return {}


def is_wait_header(name: str) -> bool:
    """is_wait_header says whether a (lower-cased) response header is one
    that may say how long to wait, the only ones sent as evidence."""
    return name in _WAIT_HEADERS or name.startswith(_WAIT_PREFIXES)


def _headers(e: BaseException) -> dict[str, str]:
    """The response headers, lower-cased, from the exception (aiohttp,
    urllib, HttpError) or its response (requests, httpx, the SDKs)."""
    for h in (getattr(e, "headers", None), getattr(getattr(e, "response", None), "headers", None)):
        out = _header_map(h)
        if out is not None:
            return out
    return {}


def _header_map(h: object) -> dict[str, str] | None:
    """A foreign headers mapping, lower-cased, each value cut to its
    bound; None when h is none or fails to iterate."""
    items = getattr(h, "items", None)
    if h is None or not callable(items):
        return None
    out: dict[str, str] = {}
    try:
        for k, v in items():
            key = str(k).lower()
            if key not in out:
                out[key] = str(v)[:_MAX_HEADER_VALUE]
    except Exception:  # a foreign mapping that fails to iterate says nothing
        return None
    return out


def _error_code(e: BaseException) -> str:
    """The error code the response's JSON body names: ``error.code``,
    else ``error.type``, else a top-level ``code`` (OpenAI's
    ``insufficient_quota``, Anthropic's ``rate_limit_error``)."""
    body = getattr(e, "body", None)
    if body is None:
        body = _loaded_json(getattr(e, "response", None))
    code = _code_in(body)
    if not code:
        with warnings.catch_warnings():  # aiohttp's deprecated ``code``
            warnings.simplefilter("ignore", DeprecationWarning)
            own = getattr(e, "code", None)
        code = own if isinstance(own, str) else ""
    return "".join(c for c in code if c.isprintable())[:_MAX_CODE]


def _code_in(body: object) -> str:
    if not isinstance(body, Mapping):
        return ""
    err = body.get("error")
    if isinstance(err, Mapping):
        for key in ("code", "type"):
            v = err.get(key)
            if isinstance(v, (str, int)) and not isinstance(v, bool) and str(v):
                return str(v)
    v = body.get("code")
    if isinstance(v, (str, int)) and not isinstance(v, bool):
        return str(v)
    # The SDKs keep the inner error object as the body.
    v = body.get("type")
    return v if isinstance(v, str) and v != "error" else ""


def _loaded_json(resp: object) -> object:
    """A response's JSON body when it is already in memory (requests'
    ``content``, httpx's once read); never reads from the network."""
    if resp is None:
        return None
    raw = getattr(resp, "_content", None)  # requests keeps the read body here
    if not isinstance(raw, (bytes, bytearray)):
        try:
            raw = getattr(resp, "content", None)  # httpx raises before it was read
        except Exception:
            return None
    if not isinstance(raw, (bytes, bytearray)) or len(raw) > 1 << 16:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _names(e: BaseException) -> str:
    return " ".join(c.__name__.lower() for c in type(e).__mro__)


def _is_dns(e: BaseException) -> bool:
    return isinstance(e, socket.gaierror) or "nameresolution" in _names(e) or "dnserror" in _names(e)


def _is_tls(e: BaseException) -> bool:
    return isinstance(e, (ssl.SSLError, ssl.CertificateError)) or "ssl" in _names(e) or "certificate" in _names(e)


def _is_refused(e: BaseException) -> bool:
    return isinstance(e, ConnectionRefusedError)


def _is_reset(e: BaseException) -> bool:
    return isinstance(e, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)) or "remotedisconnected" in _names(e)


def _is_timeout(e: BaseException) -> bool:
    return isinstance(e, (TimeoutError, asyncio.TimeoutError)) or "timeout" in _names(e)


_CHECKS: tuple[tuple[str, Callable[[BaseException], bool]], ...] = (
    (KIND_DNS, _is_dns),
    (KIND_TLS, _is_tls),
    (KIND_REFUSED, _is_refused),
    (KIND_RESET, _is_reset),
    (KIND_TIMEOUT, _is_timeout),
)


def _kind(exc: BaseException) -> str:
    """The error kind of an exception without a status: the first of DNS,
    TLS, refused, reset, timeout found along its chain, else other."""
    chain = list(_chain(exc))
    for kind, test in _CHECKS:
        if any(test(e) for e in chain):
            return kind
    return KIND_OTHER
