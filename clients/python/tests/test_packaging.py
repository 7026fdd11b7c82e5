"""The package as installed: its one version, the configuration it takes
from the environment, and extras that are what the adapters import."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import breakerd

from .fakes import Fake, json_answer

PACKAGE = Path(__file__).resolve().parent.parent


def test_version_is_the_distributions() -> None:
    pyproject = (PACKAGE / "pyproject.toml").read_text()
    m = re.search(r'^version = "([^"]+)"$', pyproject, re.M)
    assert m, "pyproject.toml has no version line"
    assert breakerd.__version__ == importlib.metadata.version("breakerd") == m.group(1)
    assert "__version__" in breakerd.__all__


@pytest.fixture
def fake() -> Iterator[Fake]:
    f = Fake(lambda method, body: json_answer({"breaker": body.get("breaker", "")}))
    yield f
    f.close()


def _client(**kw: object) -> breakerd.Client:
    return breakerd.Client(worker_id="w-env", watch=False, savings_interval=0, **kw)  # type: ignore[arg-type]


def test_client_takes_url_and_token_from_the_environment(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BREAKERD_URL", f"http://127.0.0.1:1,{fake.url}")  # a comma-separated list, as urls= takes
    monkeypatch.setenv("BREAKERD_TOKEN", "token-from-env")
    with _client() as c:
        c.get("payments")
    assert [m for m, _ in fake.requests] == ["Get"]
    assert fake.authorizations == ["Bearer token-from-env"]


def test_client_arguments_win_over_the_environment(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BREAKERD_URL", "http://127.0.0.1:1")  # nothing answers there
    monkeypatch.setenv("BREAKERD_TOKEN", "token-from-env")
    with _client(urls=fake.url, token="token-given") as c:
        c.get("payments")
    with _client(urls=fake.url, token="") as c:  # an empty token: none, whatever the environment holds
        c.get("payments")
    assert fake.authorizations == ["Bearer token-given", None]


def test_client_without_url_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BREAKERD_URL", raising=False)
    with pytest.raises(breakerd.ConfigError, match=r"urls: none given, and BREAKERD_URL is not set"):
        _client()
    monkeypatch.setenv("BREAKERD_URL", "ftp://x")
    with pytest.raises(breakerd.ConfigError, match="ftp://x"):
        _client()


def test_async_client_takes_the_environment(fake: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BREAKERD_URL", fake.url)
    c = breakerd.AsyncClient(worker_id="w-env", watch=False, savings_interval=0)
    try:
        assert [e.url for e in c.sync.transport.endpoints] == [fake.url]
    finally:
        c.sync.close()


def _imported_distributions(module: Path) -> set[str]:
    """The distributions providing the modules module imports (outside
    breakerd and the standard library); a namespace that several
    distributions share (langgraph) is read by the module's own file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return {_norm(d) for n in names for d in _providers(n)}


def _providers(module: str) -> list[str]:
    candidates = importlib.metadata.packages_distributions().get(module.split(".")[0], [])
    spec = importlib.util.find_spec(module) if len(candidates) > 1 else None
    if spec is None or spec.origin is None:
        return list(candidates)
    origin = Path(spec.origin).resolve()
    for d in candidates:
        if any(Path(str(f.locate())).resolve() == origin for f in importlib.metadata.distribution(d).files or []):
            return [d]
    return list(candidates)


def _norm(name: str) -> str:
    """_norm is a distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("adapter,extra", [("langchain", "langchain"), ("openai_agents", "openai-agents")])
def test_extra_is_what_its_adapter_imports(adapter: str, extra: str) -> None:
    requires = importlib.metadata.requires("breakerd") or []
    marker = re.compile(rf"""extra\s*==\s*["']{re.escape(extra)}["']""")
    pinned = {_norm(re.split(r"[<>=!~ ;\[]", r)[0]) for r in requires if marker.search(r)}
    imported = _imported_distributions(PACKAGE / "src" / "breakerd" / "adapters" / f"{adapter}.py")
    assert pinned == imported, f"the {extra} extra installs {sorted(pinned)}; its adapter imports {sorted(imported)}"
