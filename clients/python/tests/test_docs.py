"""docs/python.md's quick start runs as written, against a real daemon."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable

from .conftest import REPO, Daemon

DOC = REPO / "docs" / "python.md"
URL = "http://127.0.0.1:7071"


def quick_start() -> tuple[str, str]:
    """The shell and Python blocks under the page's first heading."""
    text = DOC.read_text("utf-8")
    section = text.split("\n## ", 2)[1]
    assert section.startswith("Quick start"), "docs/python.md opens with its Quick start"
    blocks = dict(re.findall(r"```(sh|python)\n(.*?)```", section, re.S))
    return blocks["sh"], blocks["python"]


def test_quick_start_is_short() -> None:
    sh, py = quick_start()
    assert URL.split("//")[1] in sh and "pip install ./clients/python" in sh
    assert len(py.strip().splitlines()) <= 12


def test_quick_start_runs(daemon: Daemon, name: Callable[[str], str]) -> None:
    _, py = quick_start()
    assert py.count(URL) == 1 and py.count('"payments"') == 1
    code = py.replace(URL, daemon.url).replace('"payments"', repr(name("payments")))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {"__name__": "quick_start"})
    assert out.getvalue() == "refunded ch_42\n"


def test_readme_quick_start_serves_what_its_snippets_call() -> None:
    """The README's first command starts a daemon with the HTTP listener
    its Python and TypeScript snippets call (the daemon's default is gRPC
    only)."""
    readme = (REPO / "README.md").read_text("utf-8")
    quick = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    first = re.search(r"```sh\n(.*?)```", quick, re.S)
    assert first is not None
    daemon_line = next(line for line in first.group(1).splitlines() if line.startswith("go run ./cmd/breakerd"))
    listen = re.search(r"--http-listen (\S+)", daemon_line)
    assert listen is not None, f"the quick start's daemon serves no HTTP API: {daemon_line!r}"
    for lang in ("python", "ts"):
        m = re.search(rf"```{lang}\n(.*?)```", readme, re.S)
        assert m is not None
        urls = set(re.findall(r"http://(127\.0\.0\.1:\d+)", m.group(1)))
        assert urls == {listen.group(1)}, f"the {lang} snippet calls {urls}, the quick start serves {listen.group(1)}"
