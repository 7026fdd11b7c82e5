"""The transport: bad configuration and answers that are not breakerd's
are exceptions naming what is wrong; a refused or slow daemon is an
outage, failed over within the budget, then answered degraded."""

from __future__ import annotations

import asyncio
import inspect
import re
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import breakerd
from breakerd._aiotransport import AsyncTransport
from breakerd._evidence import _ERROR_KINDS
from breakerd._transport import Outage, Transport

from .conftest import REPO
from .fakes import Fake, Handler, json_answer

DEAD = "http://127.0.0.1:1"  # refused at once

ALLOWED = {"decision": "DECISION_ALLOWED", "ticket": {"generation": "4"}, "state": {"breaker": "b", "state": "STATE_CLOSED"}}


def allowing(method: str, body: Any) -> tuple[int, str, bytes]:
    return json_answer(ALLOWED if method == "Allow" else {})


@pytest.fixture
def fake() -> Iterator[Fake]:
    f = Fake(allowing)
    yield f
    f.close()


def serve(h: Handler) -> Fake:
    return Fake(h)


def client(*urls: str, **kw: Any) -> breakerd.Client:
    kw.setdefault("allow_budget", 5.0)
    kw.setdefault("watch", False)
    return breakerd.Client(list(urls), worker_id="w1", **kw)


@pytest.mark.parametrize("url,what", [
    ("ftp://127.0.0.1:7071", "scheme"),
    ("http://", "no host"),
    ("http://127.0.0.1:99999", "out of range"),
    ("http://u:p@127.0.0.1:7071", "credentials"),
    ("127.0.0.1:7071", "scheme"),
])
def test_malformed_url_is_named(url: str, what: str) -> None:
    with pytest.raises(breakerd.ConfigError) as e:
        client(url)
    assert url in str(e.value) and what in str(e.value)


def test_bad_options_are_named() -> None:
    with pytest.raises(breakerd.ConfigError, match="allow_budget"):
        breakerd.Client(DEAD, allow_budget=0)
    with pytest.raises(breakerd.ConfigError, match="worker_id"):
        breakerd.Client(DEAD, worker_id=" ")


@pytest.mark.parametrize("worker_id", ["has space", "x" * 129, "wörker", "a\nb", "w;1", ""])
def test_a_worker_id_the_daemon_would_refuse_is_refused_at_construction(worker_id: str) -> None:
    with pytest.raises(ValueError, match="worker_id") as e:
        breakerd.Client(DEAD, worker_id=worker_id, watch=False)
    assert isinstance(e.value, breakerd.ConfigError) and "security.md#worker-ids" in str(e.value)


def test_every_worker_id_syntax_the_daemon_takes_is_taken() -> None:
    for worker_id in ["w", "x" * 128, "web-3.example-4121", "ci@pool/7", "a+b=c:d_e"]:
        breakerd.Client(DEAD, worker_id=worker_id, watch=False).close()


@pytest.mark.parametrize("option,value", [
    ("urls", 12345), ("urls", [DEAD, 7071]), ("urls", b"http://127.0.0.1:1"),
    ("token", 123), ("token", b"s3cret"),
    ("worker_id", 123),
    ("allow_budget", "1"), ("allow_budget", True), ("allow_budget", float("nan")), ("allow_budget", float("inf")),
    ("first_contact_budget", "1"), ("rpc_timeout", None), ("rpc_timeout", float("inf")),
    ("watch_heartbeat", 0), ("watch_heartbeat", -1), ("watch_heartbeat", "15"),
    ("savings_interval", "10"), ("savings_interval", float("nan")), ("savings_interval", True),
    ("tls", True), ("tls", "ca.pem"),
    ("watch", "payments"), ("watch", 1), ("watch", ["payments", 2]),
    ("clock", 0.0),
    ("fast", "yes"), ("fast", 1),
])
def test_a_constructor_option_of_the_wrong_kind_is_named_before_anything_starts(option: str, value: object) -> None:
    """Every option is checked when the client is made: a ConfigError that
    starts with the option's name, never a crash later in a thread. A
    token's value is never echoed."""
    kw: dict[str, Any] = {"urls": DEAD, "worker_id": "w1", "watch": False, option: value}
    with pytest.raises(breakerd.ConfigError) as e:
        breakerd.Client(**kw)
    assert str(e.value).startswith(f"{option}: must be "), str(e.value)
    assert "s3cret" not in str(e.value)


def test_every_constructor_option_has_a_rule() -> None:
    from breakerd._client import OPTIONS

    assert set(inspect.signature(breakerd.Client).parameters) == set(OPTIONS)


def test_every_kind_of_option_the_client_documents_is_taken() -> None:
    breakerd.Client((DEAD,), token="", worker_id=None, allow_budget=1, first_contact_budget=0.5, rpc_timeout=2.5,
                    tls=ssl.create_default_context(), watch=("payments", "search"), clock=time.time,
                    savings_interval=0, watch_heartbeat=1, fast=True).close()
    breakerd.Client(f"{DEAD},{DEAD}", token="t", savings_interval=-1, watch=[]).close()


@pytest.mark.parametrize("answer,what", [
    ((200, "text/html", b"<html><body>Welcome to nginx</body></html>"), "text/html"),
    ((500, "text/html", b"<html>Internal Server Error</html>"), "text/html"),
    ((200, "application/json", b"{not json"), "not JSON"),
    ((200, "application/json", b"[1, 2]"), "not an object"),
    ((500, "application/json", b'{"message": "no code"}'), "without a code"),
])
def test_not_breakerds_answer(answer: tuple[int, str, bytes], what: str) -> None:
    f = serve(lambda m, b: answer)
    try:
        with pytest.raises(breakerd.ProtocolError) as e:
            client(f.url).allow("b")
        assert what in str(e.value) and f.url in str(e.value) and str(answer[0]) in str(e.value)
    finally:
        f.close()


@pytest.mark.parametrize("answer,exc", [
    (json_answer({"code": "unauthenticated", "message": "missing bearer token"}, 401), breakerd.Unauthenticated),
    ((401, "text/plain", b"Unauthorized"), breakerd.Unauthenticated),
    (json_answer({"code": "permission_denied", "message": "role worker may not Force"}, 403), breakerd.PermissionDenied),
    ((403, "text/html", b"<h1>Forbidden</h1>"), breakerd.PermissionDenied),
])
def test_auth_errors(answer: tuple[int, str, bytes], exc: type[Exception]) -> None:
    f = serve(lambda m, b: answer)
    try:
        with pytest.raises(exc) as e:
            client(f.url).allow("b")
        assert f.url in str(e.value)
    finally:
        f.close()


def test_invalid_argument_names_the_field() -> None:
    answer = json_answer({"code": "invalid_argument", "message": "breaker: is too long",
                          "field_violations": [{"field": "breaker", "description": "is too long"}]}, 400)
    f = serve(lambda m, b: answer)
    try:
        with pytest.raises(breakerd.InvalidArgument) as e:
            client(f.url).allow("x")  # a name the client lets through; the (fake) daemon refuses it
        assert e.value.fields == ("breaker",)
        assert str(e.value).startswith(f"breakerd INVALID_ARGUMENT (HTTP 400 from {f.url}/")
        assert "breaker: is too long" in str(e.value)
    finally:
        f.close()


def test_keep_alive(fake: Fake) -> None:
    c = client(fake.url)
    for _ in range(5):
        assert c.allow("b").allowed
    # Each Allow is one request; the first also reads the policy once.
    assert [m for m, _ in fake.requests].count("Allow") == 5
    assert fake.connections == 1


def test_idle_connection_closed_by_the_daemon_is_retried(fake: Fake) -> None:
    fake.drop_idle = True
    t = Transport([fake.url])
    for _ in range(3):
        assert t.call("Allow", {"breaker": "b"}, 5)["decision"] == "DECISION_ALLOWED"
    assert fake.connections == 3


def test_failover_to_the_next_daemon(fake: Fake) -> None:
    c = client(DEAD, fake.url)
    p = c.allow("b")
    assert p.allowed and not p.degraded
    assert c.transport.failovers == 1
    # The daemon that answered is tried first from now on.
    c.allow("b")
    assert c.transport.failovers == 1


def test_slow_daemon_is_an_outage() -> None:
    def stall(m: str, b: Any) -> tuple[int, str, bytes]:
        slow.release.wait()
        return json_answer(ALLOWED)

    slow = serve(stall)
    try:
        c = client(slow.url, allow_budget=0.05, first_contact_budget=0.05)
        p = c.allow("b")
        assert p.allowed and p.degraded and p.local_generation is not None
        assert c.degraded
    finally:
        slow.close()


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "async"])
def test_a_slow_daemon_keeps_the_budget_a_passed_over_one_would_take(aio: bool) -> None:
    """A daemon that did not answer is passed over, and the one that
    answers, late, gets the whole budget rather than the half the passed-
    over one would take: the call is answered there, and the stalled
    daemon gets no new connection (the wire is the witness)."""
    late = threading.Event()

    def stall(m: str, b: Any) -> tuple[int, str, bytes]:
        hung.release.wait()
        return json_answer(ALLOWED)

    def answer(m: str, b: Any) -> tuple[int, str, bytes]:
        if late.is_set():
            time.sleep(2.5)  # past half the next call's 4 s budget
        return json_answer(ALLOWED)

    hung, slow = serve(stall), serve(answer)
    # The back-off clock stands still: no background probe reaches the stalled daemon.
    t = Transport([hung.url, slow.url], backoff_clock=lambda: 1_000_000.0)
    a = AsyncTransport(t)
    loop = asyncio.new_event_loop()

    def call(budget: float) -> dict[str, Any]:
        if aio:
            return loop.run_until_complete(a.call("Allow", {"breaker": "b"}, budget))
        return t.call("Allow", {"breaker": "b"}, budget)

    try:
        assert call(2.0)["decision"] == "DECISION_ALLOWED"  # the stalled daemon took its half, then was struck
        assert hung.connections == 1
        late.set()
        assert call(4.0)["decision"] == "DECISION_ALLOWED"
        assert hung.connections == 1, "the call went on to the stalled daemon"
    finally:
        a.close()
        loop.close()
        t.close()
        hung.close()
        slow.close()


def test_unavailable_answer_fails_over() -> None:
    down = serve(lambda m, b: json_answer({"code": "unavailable", "message": "redis unreachable"}, 503))
    up = Fake(allowing)
    try:
        c = client(down.url, up.url)
        assert not c.allow("b").degraded
        assert c.transport.failovers == 1
    finally:
        down.close()
        up.close()


def test_every_daemon_down_is_degraded() -> None:
    c = client(DEAD, "http://127.0.0.1:2", allow_budget=0.5)
    p = c.allow("b")
    assert p.allowed and p.degraded
    with pytest.raises(Outage):
        Transport([DEAD]).call("Get", {"breaker": "b"}, 0.5)


def test_token_is_sent() -> None:
    seen: list[str] = []
    f = Fake(allowing)

    class Spy(Transport):
        def headers(self) -> dict[str, str]:
            h = super().headers()
            seen.append(h.get("Authorization", ""))
            return h

    try:
        Spy([f.url], token="s3cret").call("Get", {"breaker": "b"}, 5)
        assert seen == ["Bearer s3cret"]
    finally:
        f.close()


async def test_async_check_is_the_clients(fake: Fake) -> None:
    async with breakerd.AsyncClient(fake.url, worker_id="w1", watch=False) as c:
        await c.check()
    assert [m for m, _ in fake.requests] == ["BatchGet"]
    c = breakerd.AsyncClient(DEAD, worker_id="w1", watch=False)
    with pytest.raises(breakerd.BreakerdError, match="no breakerd answers at") as e:
        await c.check()
    assert isinstance(e.value.__cause__, Outage)
    await c.close()


def test_check_names_the_cause_and_says_within_only_for_a_timeout() -> None:
    c = client(DEAD, rpc_timeout=2.0)
    with pytest.raises(breakerd.BreakerdError) as e:
        c.check()
    assert "Connection refused" in str(e.value) and "within" not in str(e.value), str(e.value)
    assert isinstance(e.value.__cause__, Outage) and isinstance(e.value.__cause__.__cause__, ConnectionRefusedError)
    c.close()
    silent = Fake(allowing)
    silent.handler = lambda m, b: (silent.release.wait(30), json_answer({}))[1]
    try:
        c = client(silent.url, rpc_timeout=0.3, allow_budget=0.3)
        with pytest.raises(breakerd.BreakerdError, match=r"within 0\.300s"):
            c.check()
        c.close()
    finally:
        silent.release.set()
        silent.close()


@pytest.mark.parametrize(
    ("breaker", "tool", "field"),
    [("", "", "breaker"), ("x" * 257, "", "breaker"), ("a\tb", "", "breaker"), (" b", "", "breaker"),
     ("payments", "bad tool", "tool"), ("payments", "x" * 129, "tool"), ("payments", "a/b", "tool")],
)
def test_a_refused_name_is_invalid_argument_never_the_fallback(breaker: str, tool: str, field: str) -> None:
    """With no daemon reachable, a name breakerd would refuse is still an
    error naming its field, never an answer of the local fallback, and it
    says the client refused it: no HTTP status, no URL."""
    c = breakerd.Client(DEAD, worker_id="w")
    try:
        with pytest.raises(breakerd.InvalidArgument) as e:
            c.allow(breaker, tool=tool)
        assert e.value.fields == (field,)
        assert e.value.status == 0
        assert str(e.value).startswith(f"breakerd INVALID_ARGUMENT (refused by the client, not sent): {field}: ")
    finally:
        c.close()


@pytest.mark.parametrize("fast", [False, True], ids=["strict", "fast"])
@pytest.mark.parametrize(("breaker", "tool", "field"),
                         [(123, "", "breaker"), (None, "", "breaker"), (["payments"], "", "breaker"),
                          ("payments", 123, "tool"), ("payments", None, "tool")])
def test_a_name_that_is_not_a_string_says_so(breaker: Any, tool: Any, field: str, fast: bool) -> None:
    c = breakerd.Client(DEAD, worker_id="w", watch=False, fast=fast)
    try:
        with pytest.raises(breakerd.InvalidArgument) as e:
            c.allow(breaker, tool=tool)
        bad = breaker if field == "breaker" else tool
        assert e.value.fields == (field,) and e.value.status == 0
        assert e.value.message == f"{field}: must be a string, got {type(bad).__name__}"
    finally:
        c.close()


@pytest.fixture
def offline() -> Iterator[breakerd.Client]:
    """A client no daemon answers: what it refuses never reaches the fallback."""
    c = breakerd.Client(DEAD, worker_id="w", watch=False)
    yield c
    c.close()


def record(c: breakerd.Client, aio: bool, *args: Any, **kw: Any) -> dict[str, Any]:
    if aio:
        return asyncio.run(c.aio.record(*args, **kw))
    return c.record(*args, **kw)


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(("permit", "exc", "param"),
                         [(None, None, "permit"), ("permit", None, "permit"), ({"breaker": "b"}, None, "permit"),
                          ("a permit", "boom", "exc"), ("a permit", 503, "exc"), ("a permit", ValueError, "exc")])
def test_record_names_a_permit_or_exc_of_the_wrong_type(offline: breakerd.Client, permit: Any, exc: Any, param: str,
                                                        aio: bool) -> None:
    p = offline.allow("payments") if permit == "a permit" else permit
    with pytest.raises(TypeError, match=f"^{param}: must be "):
        record(offline, aio, p, exc)


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(("kw", "field"), [
    ({"evidence": {"http_status": "x"}}, "evidence.http_status"),
    ({"evidence": {"http_status": 700}}, "evidence.http_status"),
    ({"evidence": {"http_status": True}}, "evidence.http_status"),
    ({"evidence": {"grpc_status": 99}}, "evidence.grpc_status"),
    ({"evidence": {"grpc_retry_delay_ms": -1}}, "evidence.grpc_retry_delay_ms"),
    ({"evidence": {"error_kind": "ERROR_KIND_NOPE"}}, "evidence.error_kind"),
    ({"evidence": {"headers": ["retry-after"]}}, "evidence.headers"),
    ({"evidence": {"headers": {"retry-after": 120}}}, "evidence.headers"),
    ({"evidence": {"date": 0}}, "evidence.date"),
    ({"evidence": {"body_error_code": None}}, "evidence.body_error_code"),
    ({"evidence": {"no_deadline": "yes"}}, "evidence.no_deadline"),
    ({"evidence": {"http_statu": 503}}, "evidence.http_statu"),
    ({"evidence": "boom"}, "evidence"),
    ({"latency_ms": -5}, "latency_ms"),
    ({"latency_ms": 1.5}, "latency_ms"),
    ({"deadline_ms": -1}, "deadline_ms"),
    ({"deadline_ms": "1000"}, "deadline_ms"),
    ({"deadline_ms": 8 * 24 * 3600 * 1000}, "deadline_ms"),
    ({"message": 42}, "message"),
    ({"outcome": 3}, "outcome"),
])
def test_record_refuses_a_bad_field_naming_it(offline: breakerd.Client, kw: dict[str, Any], field: str,
                                              aio: bool) -> None:
    """Refused by the client, not sent, and never counted by the fallback
    meanwhile, whether or not a daemon answers."""
    p = offline.allow("payments")
    with pytest.raises(breakerd.InvalidArgument) as e:
        record(offline, aio, p, None, **kw)
    assert e.value.fields == (field,) and e.value.status == 0
    assert e.value.message.startswith(f"{field}: "), e.value.message


def test_record_takes_the_evidence_the_wire_takes(offline: breakerd.Client) -> None:
    p = offline.allow("payments")
    for ev in ({"http_status": "503"}, {"grpc_status": 0, "grpc_retry_delay_ms": "1500"}, {"error_kind": 5},
               {"http_status": 429, "headers": {"retry-after": "120"}, "date": "Sun, 25 Oct 2026 09:33:20 GMT",
                "body_error_code": "rate_limit_error", "no_deadline": False}):
        assert offline.record(p, evidence=ev, latency_ms=12, deadline_ms=0)["degraded"] is True


def test_the_error_kinds_record_takes_are_the_protos() -> None:
    """The client's list of ErrorKind values, by number, is the enum of
    proto/breakerd/v1/breaker.proto: a kind added there is taken here."""
    proto = (REPO / "proto" / "breakerd" / "v1" / "breaker.proto").read_text()
    declared = {int(n): name for name, n in re.findall(r"^\s*(ERROR_KIND_\w+) = (\d+);", proto, re.M)}
    assert list(_ERROR_KINDS) == [declared[n] for n in range(len(declared))]


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(("breakers", "field"), [("abc", "breakers"), (b"abc", "breakers"), (7, "breakers"),
                                                 (["a", 1], "breakers[1]"), (["a", ""], "breakers[1]")])
def test_batch_get_refuses_what_is_not_a_list_of_names(offline: breakerd.Client, breakers: Any, field: str,
                                                        aio: bool) -> None:
    with pytest.raises(breakerd.InvalidArgument) as e:
        if aio:
            asyncio.run(offline.aio.batch_get(breakers))
        else:
            offline.batch_get(breakers)
    assert e.value.fields == (field,) and e.value.status == 0
