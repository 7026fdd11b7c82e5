"""Real daemons for the suite: breakerd built from this repository, on free
loopback ports, on the Redis at BREAKERD_TEST_REDIS_ADDR (scripts/test.sh
always sets it) or, without one, each on its own embedded Redis. Every
test names its breakers with a fresh prefix, so copies of the suite can
share one Redis."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# The policy every test daemon runs: small thresholds and a long cooldown
# (no test waits for one), an alternative to read in the tool result.
POLICY = """\
defaults:
  threshold: 3
  min_workers: 2
  cooldown_base: 10m
  cooldown_cap: 1h
breakers:
  - match: "*payments"
    alternatives: [issue_refund_manually]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stops the run at once, saying what is missing, when a Redis is named
    and none answers there (each test would otherwise wait on a daemon that
    cannot serve)."""
    addr = os.environ.get("BREAKERD_TEST_REDIS_ADDR", "")
    if addr:
        host, _, port = addr.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
        except (OSError, ValueError) as e:
            pytest.exit(f"no Redis answers at BREAKERD_TEST_REDIS_ADDR={addr} ({e}): start one "
                        "(redis-server --port N) or unset it to run each daemon on an embedded Redis", 2)


@pytest.fixture(scope="session")
def breakerd_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The daemon built from this repository (BREAKERD_TEST_BIN names a
    binary built elsewhere instead)."""
    if os.environ.get("BREAKERD_TEST_BIN"):
        return Path(os.environ["BREAKERD_TEST_BIN"])
    out = tmp_path_factory.mktemp("bin") / "breakerd"
    try:
        subprocess.run(["go", "build", "-o", str(out), "./cmd/breakerd"], cwd=REPO, check=True)
    except FileNotFoundError:
        pytest.exit("the tests build breakerd with go, and go is not on PATH (or set BREAKERD_TEST_BIN)", 2)
    return out


class Daemon:
    """Daemon is one breakerd process; ``url`` is its HTTP/JSON API;
    ``env`` is added to the suite's environment for it."""

    def __init__(self, binary: Path, redis_url: str, workdir: Path, extra: list[str],
                 env: dict[str, str] | None = None) -> None:
        self.binary, self.redis_url, self.workdir, self.extra = binary, redis_url, workdir, extra
        self.env = {**os.environ, **env} if env else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.start()

    def start(self, http_port: int = 0) -> None:
        """start runs the daemon on http_port (0: a free one)."""
        policy = self.workdir / "policy.yaml"
        policy.write_text(POLICY)
        for _ in range(1 if http_port else 5):  # a port taken between probe and bind: another
            port = http_port or free_port()
            args = [str(self.binary), "--listen", f"127.0.0.1:{free_port()}",
                    "--http-listen", f"127.0.0.1:{port}", "--config", str(policy), *self.extra]
            if self.redis_url:
                args += ["--redis-url", self.redis_url]
            log = open(self.workdir / f"breakerd-{port}-{len(list(self.workdir.iterdir()))}.log", "wb")
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, env=self.env)
            log.close()
            self.url = f"http://127.0.0.1:{port}"
            if self._ready():
                return
            self.stop()
        raise RuntimeError(f"breakerd did not start; logs in {self.workdir}")

    def _ready(self) -> bool:
        assert self.proc is not None
        while self.proc.poll() is None:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def restart(self) -> None:
        """restart starts a stopped daemon again at the same URL."""
        self.start(int(self.url.rsplit(":", 1)[1]))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def redis_url() -> str:
    addr = os.environ.get("BREAKERD_TEST_REDIS_ADDR", "")
    return f"redis://{addr}/0" if addr else ""


@pytest.fixture
def daemons(breakerd_bin: Path) -> Iterator[Callable[..., Daemon]]:
    """daemons(*flags, env=None) starts a daemon on the suite's Redis (the
    shared one when set; two or more need BREAKERD_TEST_REDIS_ADDR), with
    env added to its environment."""
    started: list[Daemon] = []
    workdir = Path(tempfile.mkdtemp(prefix="breakerd-py-"))

    def start(*extra: str, env: dict[str, str] | None = None) -> Daemon:
        d = Daemon(breakerd_bin, redis_url(), workdir, list(extra), env)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


@pytest.fixture
def daemon(daemons: Callable[..., Daemon]) -> Daemon:
    return daemons()


@pytest.fixture
def two_daemons(daemons: Callable[..., Daemon]) -> tuple[Daemon, Daemon]:
    if not redis_url():
        pytest.skip("two daemons need one shared Redis: set BREAKERD_TEST_REDIS_ADDR (scripts/test.sh does)")
    return daemons(), daemons()


@pytest.fixture
def name() -> Callable[[str], str]:
    """name(x) is a breaker name unique to this test (shared Redis)."""
    prefix = "py-" + uuid.uuid4().hex[:10] + ":"
    return lambda x: prefix + x
