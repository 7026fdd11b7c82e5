"""Fast mode against real daemons built from this repository: healthy
calls cost Redis nothing (its commands counted at a Redis of this test's
own), a trip made by other workers reaches the view over the stream with
no Allow sent (counted at a proxy), a failure and the success after it
are sent, the fleet still gets one probe, a stalled stream sends Allows
back to breakerd, the async client shares the view, and the
classification rows reach breakerd through fast mode as written."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import breakerd

from .conftest import REPO, Daemon, free_port
from .proxy import Proxy
from .test_daemon import wait_for

POLICY = """\
defaults:
  threshold: 3
  min_workers: 2
  cooldown_base: 10m
breakers:
  - match: "*probe"
    threshold: 1
    min_workers: 1
    cooldown_base: 1ms
    cooldown_cap: 1ms
"""
HEALTHY_CALLS = 1000


class Redis:
    """A redis-server of this test's own, for counting its commands."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--save", "", "--appendonly", "no",
                                      "--bind", "127.0.0.1"], stdout=subprocess.DEVNULL)
        wait_for(lambda: self._answers(), "this test's Redis")

    def _answers(self) -> bool:
        try:
            return self.command("PING").startswith("+PONG")
        except OSError:
            return False

    def command(self, cmd: str) -> str:
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(cmd.encode() + b"\r\n")
            out = b""
            while True:
                out += s.recv(65536)
                if out.startswith((b"+", b"-")) and out.endswith(b"\r\n"):
                    break
                head, _, rest = out.partition(b"\r\n")
                if head.startswith(b"$") and len(rest) >= int(head[1:]):
                    break
            return out.decode("latin-1")

    def scripts(self) -> int:
        """How many scripts and reads Redis ran (INFO commandstats): the
        cost of Allows and Records."""
        n = 0
        for line in self.command("INFO commandstats").splitlines():
            name, _, stats = line.removeprefix("cmdstat_").partition(":calls=")
            if stats and name.startswith(("eval", "fcall", "hget", "hmget", "hgetall", "get", "mget")):
                n += int(stats.split(",", 1)[0])
        return n

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


@pytest.fixture(scope="module")
def fleet(breakerd_bin: Path) -> Iterator[tuple[Redis, Daemon, Daemon]]:
    """Two daemons on a Redis of the module's own, with a short heartbeat
    (a stalled stream is dropped within 3 of them)."""
    r = Redis()
    work = Path(tempfile.mkdtemp(prefix="breakerd-py-fast-"))
    policy = work / "fast-policy.yaml"
    policy.write_text(POLICY)
    url = f"redis://127.0.0.1:{r.port}/0"
    ds = [Daemon(breakerd_bin, url, work, ["--config", str(policy), "--http-heartbeat", "200ms"]) for _ in range(2)]
    yield r, ds[0], ds[1]
    for d in ds:
        d.stop()
    r.close()


def fast(url: str, worker: str, **kw: Any) -> breakerd.Client:
    return breakerd.Client(url, worker_id=worker, fast=True, allow_budget=5.0, savings_interval=0, **kw)


def strict(url: str, worker: str) -> breakerd.Client:
    return breakerd.Client(url, worker_id=worker, watch=False, allow_budget=5.0, savings_interval=0)


def in_process(c: breakerd.Client, b: str) -> bool:
    """in_process says c's view answers an Allow of b itself (breakerd's
    last word it heard: closed, nothing denied)."""
    assert c.fast is not None
    e = c.fast._entries.get(b)
    return e is not None and e.healthy


def ok(c: breakerd.Client, b: str) -> None:
    with c.guard(b):
        pass


def fail(c: breakerd.Client, b: str) -> None:
    with pytest.raises(httpx.HTTPStatusError):
        with c.guard(b, tool="refund_charge"):
            httpx.Response(503, request=httpx.Request("POST", "http://vendor/")).raise_for_status()


def proxy(d: Daemon) -> Proxy:
    return Proxy(urllib.parse.urlsplit(d.url).netloc)


def test_healthy_calls_cost_redis_nothing(fleet: tuple[Redis, Daemon, Daemon], name: Callable[[str], str]) -> None:
    r, d, _ = fleet
    c, s = fast(d.url, "fast-1"), strict(d.url, "strict-1")
    try:
        b = name("x")
        ok(c, b)  # learns the breaker
        assert c.cache.wait_live(30)
        at = r.scripts()
        for _ in range(HEALTHY_CALLS):
            ok(c, b)
        spent = r.scripts() - at
        for _ in range(20):
            ok(s, b)
        spent_strict = r.scripts() - at - spent
        assert spent == 0, f"{spent} Redis scripts and reads for {HEALTHY_CALLS} healthy fast calls"
        assert spent_strict >= 40, f"the count misses strict calls: {spent_strict}"
        assert c.fast is not None and c.fast.allowed >= HEALTHY_CALLS and c.fast.skipped >= HEALTHY_CALLS
    finally:
        c.close()
        s.close()


def test_a_trip_reaches_the_view_with_no_allow_sent(fleet: tuple[Redis, Daemon, Daemon], name: Callable[[str], str]) -> None:
    _, d, d2 = fleet
    px = proxy(d)
    c = fast(px.url, "fast-2")
    w1, w2 = strict(d2.url, "w1"), strict(d2.url, "w2")
    try:
        b = name("payments")
        ok(c, b)
        assert c.cache.wait_live(30)
        allows = px.methods["Allow"]
        for w in (w1, w2, w1):
            fail(w, b)
        wait_for(lambda: not c.allow(b).allowed, "the trip in the fast view")
        p = c.allow(b)
        assert p.decision == "DECISION_DENIED_OPEN" and p.verdict is not None
        words = lambda t: {**json.loads(t), "may_return_in_ms": 0}  # noqa: E731 - counted down on each side's clock
        assert words(p.tool_result) == words(w1.allow(b).tool_result)
        assert px.methods["Allow"] == allows, "an Allow of the fast client went to breakerd"
    finally:
        for x in (c, w1, w2):
            x.close()
        px.close()


def test_a_failure_and_the_success_after_it_are_sent(fleet: tuple[Redis, Daemon, Daemon], name: Callable[[str], str]) -> None:
    _, d, _ = fleet
    px = proxy(d)
    c = fast(px.url, "fast-3")
    try:
        b = name("x")
        ok(c, b)
        assert c.cache.wait_live(30)
        records = px.methods["Record"]
        fail(c, b)
        ans = c.record(c.allow(b))
        assert ans.get("note") != breakerd.FAST_NOT_SENT
        assert px.methods["Record"] - records == 2
    finally:
        c.close()
        px.close()


def test_a_fast_permit_carries_the_generation_the_view_last_heard(fleet: tuple[Redis, Daemon, Daemon],
                                                                  name: Callable[[str], str]) -> None:
    _, d, _ = fleet
    c = fast(d.url, "fast-gen")
    try:
        b = name("gen-probe")  # a threshold of 1, a cooldown of 1 ms
        ok(c, b)
        assert c.cache.wait_live(30)
        wait_for(lambda: in_process(c, b), "the view's word on the breaker")
        before = c.allow(b)
        assert before.fast and before.allowed
        gen = int(before.ticket["generation"])
        with pytest.raises(httpx.HTTPStatusError):  # trips it, through a permit of the same tool
            with c.guard(b):
                httpx.Response(503, request=httpx.Request("POST", "http://vendor/")).raise_for_status()

        def closed_again() -> bool:
            try:
                ok(c, b)  # the probe, once its cooldown is over
            except breakerd.CircuitOpen:
                return False
            return in_process(c, b) and c.fast is not None and c.fast._entries[b].gen > gen

        wait_for(closed_again, "the breaker closed again by its probe, in the view")
        after = c.allow(b)
        assert c.fast is not None
        assert after.fast and int(after.ticket["generation"]) == c.fast._entries[b].gen > gen
    finally:
        c.close()


def test_two_fast_clients_get_one_probe(fleet: tuple[Redis, Daemon, Daemon], name: Callable[[str], str]) -> None:
    _, d, d2 = fleet
    a, b = fast(d.url, "probe-a"), fast(d2.url, "probe-b")
    try:
        n = name("probe")
        ok(a, n)
        ok(b, n)
        assert a.cache.wait_live(30) and b.cache.wait_live(30)
        fail(a, n)  # threshold 1: open; its 1 ms cooldown then due
        # b's view may allow in-process until the trip reaches its stream
        # (the trade fast mode makes); the probe is judged once it has.
        wait_for(lambda: not in_process(b, n), "the trip in b's view")
        probes: list[breakerd.Permit] = []

        def asked() -> bool:
            got = [a.allow(n), b.allow(n), a.allow(n), b.allow(n)]
            probes.extend(p for p in got if p.probe)
            return bool(probes)

        wait_for(asked, "a probe")
        for _ in range(10):
            got = [a.allow(n), b.allow(n)]
            probes.extend(p for p in got if p.probe)
            assert not any(p.allowed for p in got), "a call went out beside the probe"
        assert len(probes) == 1, "one probe fleet-wide"
    finally:
        a.close()
        b.close()


def test_a_stalled_stream_sends_allows_to_breakerd(fleet: tuple[Redis, Daemon, Daemon], name: Callable[[str], str]) -> None:
    _, d, d2 = fleet
    px = proxy(d)
    c = fast(px.url, "fast-4")
    w1, w2 = strict(d2.url, "w1"), strict(d2.url, "w2")
    try:
        b = name("x")
        ok(c, b)
        assert c.cache.wait_live(30)
        px.stall()
        wait_for(lambda: not c.cache.live, "the stream dropped after its missed heartbeats")
        for w in (w1, w2, w1):
            fail(w, b)
        px.restore()
        assert c.allow(b).decision == "DECISION_DENIED_OPEN", "breakerd was asked, not the stale view"
    finally:
        for x in (c, w1, w2):
            x.close()
        px.close()


def test_the_async_client_answers_from_the_view(fleet: tuple[Redis, Daemon, Daemon], name: Callable[[str], str]) -> None:
    r, d, _ = fleet

    async def main() -> None:
        async with breakerd.AsyncClient(d.url, worker_id="fast-5", fast=True, allow_budget=5.0, savings_interval=0) as c:
            b = name("x")
            async with c.guard(b):
                pass
            assert c.sync.cache.wait_live(30)
            at = r.scripts()
            for _ in range(100):
                async with c.guard(b):
                    pass
            assert r.scripts() == at

    asyncio.run(main())


def test_every_classification_row_reaches_breakerd_through_fast_mode(fleet: tuple[Redis, Daemon, Daemon],
                                                                      name: Callable[[str], str]) -> None:
    _, d, _ = fleet
    rows = json.loads((REPO / "conformance" / "classification.json").read_text())["rows"]
    c = fast(d.url, "fast-6")
    try:
        ok(c, name("warm"))
        assert c.cache.wait_live(30)
        wrong = []
        for i, row in enumerate(rows):
            ans = c.record(c.allow(name(f"row-{i}")), evidence=dict(row["evidence"]), deadline_ms=row.get("deadline_ms", 0))
            if ans.get("note") == breakerd.FAST_NOT_SENT:
                if row["want"]["outcome"] != "OUTCOME_SUCCESS":
                    wrong.append((row["name"], "not sent"))
            elif ans.get("classified_as") != row["want"]["outcome"]:
                wrong.append((row["name"], ans.get("classified_as")))
        assert wrong == []
    finally:
        c.close()


def test_a_breaker_the_stream_does_not_follow_is_never_answered_here(fleet: tuple[Redis, Daemon, Daemon],
                                                                      name: Callable[[str], str]) -> None:
    _, d, _ = fleet
    followed, other = name("followed"), name("other")
    c = fast(d.url, "fast-7", watch=[followed])
    try:
        ok(c, followed)
        ok(c, other)
        assert c.cache.wait_live(30)
        assert c.allow(followed).fast
        assert not c.allow(other).fast, "a breaker no event reaches was answered from the view"
    finally:
        c.close()
