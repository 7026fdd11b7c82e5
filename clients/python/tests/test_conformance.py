"""conformance/ in this suite: the rendered texts byte for byte, the
fallback subset, and the classification table (each row's evidence
produced by a real library's exception, and classified by a real daemon
as the row says)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests

import breakerd
from breakerd import Unavailable, _denial, _render
from breakerd._denial import Denial
from breakerd._evidence import evidence_of, is_wait_header
from breakerd._fallback import LocalBreaker, LocalPolicy, counts, outcome_counts

from .conftest import REPO

CONFORMANCE = REPO / "conformance"
PACKAGE = Path(breakerd.__file__).parent


def load(name: str) -> Any:
    return json.loads((CONFORMANCE / name).read_text("utf-8"))


def cases(name: str, key: str) -> list[Any]:
    return [pytest.param(c, id=c["name"]) for c in load(name)[key]]


# -- templates and rendering ----------------------------------------------------


@pytest.mark.parametrize("name", ["tool_result.tmpl", "notice.tmpl", "tool_failure.tmpl"])
def test_templates_are_the_repositorys(name: str) -> None:
    """The package ships copies (a wheel has no repository): the same
    bytes as conformance/templates."""
    assert (PACKAGE / "templates" / name).read_bytes() == (CONFORMANCE / "templates" / name).read_bytes()


@pytest.mark.parametrize("case", cases("render.json", "cases"))
def test_render(case: dict[str, Any]) -> None:
    if case["template"] == "notice":
        got = _render.notice_of(case["input"]["denials"], case["now_ms"])
    elif case["template"] == "tool_failure":
        got = _render.render(_render.template("tool_failure"), case["input"])
    else:
        got = _render.render_tool_result(case["input"], case["now_ms"])
    assert got == case["want"]



def denial_of(inp: dict[str, Any]) -> Denial:
    """The Denial a daemon sends for a case's input (its words, scope,
    forced flag and return time)."""
    return Denial(decision="DECISION_DENIED_OPEN", status=inp["status"], reason=inp["reason"],
                  scope="DENIAL_SCOPE_" + inp["scope"].upper(), forced=inp["forced"],
                  may_return_at_ms=inp["may_return_at_ms"])


@pytest.mark.parametrize("case", [c for c in cases("render.json", "cases") if c.values[0]["template"] == "tool_result"])
def test_client_tool_result(case: Any) -> None:
    """The client's own path from a Denial (a denied call's, the open
    cache's, a run's memory) gives the same bytes."""
    inp = case["input"]
    got = _render.tool_result(denial_of(inp), inp["tool"], inp["alternatives"], inp["degraded"], case["now_ms"])
    assert got == case["want"]


@pytest.mark.parametrize("case", [c for c in cases("render.json", "cases") if c.values[0]["template"] == "notice"])
def test_client_notice(case: Any) -> None:
    """A run's notice over the Denials it kept gives the same bytes."""
    lost = [Unavailable(tool=d["tool"], breaker="b", decision="", reason=d["reason"], deny_until_ms=0, removed_at_ms=0,
                        alternatives=tuple(d["alternatives"]), degraded=d["degraded"], denial=denial_of(d))
            for d in case["input"]["denials"]]
    assert _render.notice(lost, case["now_ms"]) == case["want"]


@pytest.mark.parametrize("case", [c for c in cases("render.json", "cases") if "fallback" in c.values[0]])
def test_fallback_denials(case: Any) -> None:
    """The local fallback's own denials (fallback_denials.json's words,
    degraded; a probe in flight has no return time) give the vectors'
    bytes."""
    probe = case["fallback"] == "probe_in_flight"
    inp = case["input"]["denials"][0] if case["template"] == "notice" else case["input"]
    d = _denial.fallback("DECISION_DENIED_PROBE_IN_FLIGHT" if probe else "DECISION_DENIED_OPEN", probe,
                         inp["may_return_at_ms"] or 1_793_000_030_000)
    if case["template"] == "notice":
        lost = Unavailable(tool=inp["tool"], breaker="b", decision=d.decision, reason=d.reason, deny_until_ms=d.deny_until_ms,
                           removed_at_ms=0, alternatives=tuple(inp["alternatives"]), degraded=True, denial=d)
        assert _render.notice([lost], case["now_ms"]) == case["want"]
    else:
        assert _render.tool_result(d, inp["tool"], inp["alternatives"], True, case["now_ms"]) == case["want"]


def test_template_syntax_errors() -> None:
    for bad in ("{{ name }}", "{{#a}}x", "{{/a}}", "{{#a}}{{/b}}", "{{a|upper}}", "{{A}}"):
        with pytest.raises(_render.TemplateError):
            _render.parse(bad)


@pytest.mark.parametrize("name", ["client_rules.json", "fallback_denials.json"])
def test_data_is_the_repositorys(name: str) -> None:
    assert (PACKAGE / "data" / name).read_bytes() == (CONFORMANCE / name).read_bytes()


# -- client_rules.json: what the client keeps without a daemon ------------------------


RULES = load("client_rules.json")


def test_fallback_defaults() -> None:
    assert dataclasses.asdict(LocalPolicy()) == RULES["defaults"]


def test_wait_headers_sent_are_exactly_the_listed() -> None:
    """A 429 carrying every header that looks like a wait sends exactly
    the ones breakerd reads."""
    listed = RULES["wait_headers"]
    others = ["ratelimit", "ratelimit-limit", "ratelimit-remaining", "x-ratelimit-remaining-requests",
              "x-ratelimit-limit-tokens", "anthropic-ratelimit-requests-remaining", "retry-after-s", "set-cookie"]
    headers = {h.upper(): str(i) for i, h in enumerate(listed + others)}
    got = evidence_of(http_error({"http_status": 429, "headers": headers}))
    assert got["headers"] == {h: str(i) for i, h in enumerate(listed)}
    assert all(is_wait_header(h) for h in listed) and not any(is_wait_header(h) for h in others)
    assert all(is_wait_header(p + "x") for p in RULES["wait_header_prefixes"])


ROWS_BY_NAME = {r["name"]: r for r in load("classification.json")["rows"]}


@pytest.mark.parametrize("row", [pytest.param(ROWS_BY_NAME[n], id=n) for n in RULES["fallback_counts"]])
def test_fallback_counts(row: dict[str, Any], kinds: dict[str, BaseException]) -> None:
    """The local fallback counts what the daemon counts for the rows it
    must reproduce, from the row's evidence and from the evidence of a
    Python failure of that kind."""
    assert (counts(row["evidence"]) is True) == row["want"]["counts"]
    assert (counts(evidence_of(python_failure(row["evidence"], kinds))) is True) == row["want"]["counts"]


# -- the fallback subset ----------------------------------------------------------


@pytest.mark.parametrize("case", cases("fallback.json", "cases"))
def test_fallback(case: dict[str, Any]) -> None:
    now = [0]
    lb = LocalBreaker(lambda: now[0])
    lb.set_policy("b", LocalPolicy(**case["policy"]))
    granted: tuple[int, bool] | None = None
    for i, step in enumerate(case["steps"]):
        now[0] = step["at_ms"]
        if step["op"] == "allow":
            d = lb.allow("b")
            got = {"decision": d.decision, "retry_after_ms": d.retry_after_ms}
            assert got == step["want"], f"step {i} at {now[0]} ms"
            if d.allowed:
                granted = (d.generation, d.decision == "DECISION_PROBE")
        else:
            assert granted is not None, f"step {i}: a record with no call granted"
            lb.record("b", granted[0], granted[1], outcome_counts(step["outcome"]))


# -- the classification table -----------------------------------------------------


class RpcError(Exception):
    """Shaped as grpc.RpcError is (``code()`` returns a StatusCode whose
    value is ``(int, name)``): grpcio is not among the suite's packages."""

    def __init__(self, code: int) -> None:
        super().__init__(f"rpc error {code}")
        self._code = code

    def code(self) -> Any:
        return type("StatusCode", (), {"value": (self._code, "X")})()


@pytest.fixture(scope="module")
def kinds() -> Iterator[dict[str, BaseException]]:
    """A real library exception for each error kind."""
    from .test_evidence import DEAD, NOWHERE, raised

    out: dict[str, BaseException] = {
        "ERROR_KIND_REFUSED": raised(requests.get, DEAD, timeout=5),
        "ERROR_KIND_DNS": raised(httpx.get, NOWHERE, timeout=5),
        "ERROR_KIND_RESET": ConnectionResetError(104, "Connection reset by peer"),
        "ERROR_KIND_TIMEOUT": httpx.ReadTimeout("timed out"),
        "ERROR_KIND_TLS": requests.exceptions.SSLError("certificate verify failed"),
        "ERROR_KIND_CANCELLED": asyncio.CancelledError(),
        "ERROR_KIND_BREAKERD_DENIAL": breakerd.CircuitOpen("x", "DECISION_DENIED_OPEN", "down", 0, "{}"),
        "ERROR_KIND_MALFORMED_OUTPUT": breakerd.MalformedOutput("no id"),
        "ERROR_KIND_OTHER": ValueError("bug in the tool"),
    }
    yield out


def http_error(ev: dict[str, Any]) -> BaseException:
    """An httpx status error carrying the row's status, headers, date and
    body error code."""
    headers = dict(ev.get("headers", {}))
    if "date" in ev:
        headers["date"] = ev["date"]
    body = {"error": {"code": ev["body_error_code"]}} if "body_error_code" in ev else {}
    r = httpx.Response(ev["http_status"], headers=headers, json=body, request=httpx.Request("GET", "http://vendor/"))
    try:
        r.raise_for_status()
    except httpx.HTTPStatusError as e:
        return e
    raise AssertionError("no error")


def python_failure(ev: dict[str, Any], kinds: dict[str, BaseException]) -> BaseException | None:
    """The failure a Python tool meets for the row's evidence: a status
    error for a 4xx/5xx (unless the caller cancelled or breakerd denied,
    which win), an RpcError for a gRPC status, an exception of the kind,
    or nothing (a success)."""
    kind = ev.get("error_kind", "")
    if kind in ("ERROR_KIND_CANCELLED", "ERROR_KIND_BREAKERD_DENIAL"):
        return kinds[kind]
    if ev.get("http_status", 0) >= 400:
        return http_error(ev)
    if kind:
        return kinds[kind]
    if ev.get("grpc_status"):
        return RpcError(ev["grpc_status"])
    return None


def exact(ev: dict[str, Any]) -> bool:
    """Rows whose evidence a Python failure states exactly as written
    (the others mix what one exception never carries together: a status
    with a kind, a 2xx status, a gRPC OK, a date only in the headers)."""
    status = ev.get("http_status", 0)
    if "error_kind" in ev and (status or "grpc_status" in ev) or (status and "grpc_status" in ev):
        return False
    if 0 < status < 400 or ev.get("grpc_status") == 0 or "grpc_retry_delay_ms" in ev:
        return False
    return "no_deadline" not in ev and "date" not in ev.get("headers", {})


ROWS = cases("classification.json", "rows")


@pytest.mark.parametrize("row", ROWS)
def test_evidence_of_each_row(row: dict[str, Any], kinds: dict[str, BaseException]) -> None:
    ev = row["evidence"]
    got = evidence_of(python_failure(ev, kinds))
    if exact(ev):
        # Headers that say nothing of a wait never leave the process.
        want = dict(ev)
        if "headers" in ev:
            want["headers"] = {k: v for k, v in ev["headers"].items() if is_wait_header(k)}
        assert got == want
    else:
        # What decides the row is there (test_every_row_classifies_as_written
        # has the daemon confirm the outcome).
        kind, status = ev.get("error_kind", ""), ev.get("http_status", 0)
        if kind in ("ERROR_KIND_CANCELLED", "ERROR_KIND_BREAKERD_DENIAL"):
            assert got == {"error_kind": kind}
        elif status >= 400:
            assert got["http_status"] == status
        elif kind:
            assert got == {"error_kind": kind}
        elif ev.get("grpc_status"):
            assert got == {"grpc_status": ev["grpc_status"]}
        else:
            assert got == {}
