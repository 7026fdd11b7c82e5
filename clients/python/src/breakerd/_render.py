"""The words a model reads: a denial's tool result and a run's notice.

Both come from breakerd's templates (``templates/``, copies of the
repository's conformance/templates, held byte-identical by the suite),
in the small Mustache subset conformance/README.md defines, so that the
daemon and every client render the same bytes from the same inputs. The
inputs are breakerd's Denial (``_denial``) with the tool's name, the
alternatives, the degraded flag and the clock at answer time: the client
keeps no words of its own.
"""

from __future__ import annotations

import functools
import importlib.resources
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from ._denial import FOREVER, Denial

if TYPE_CHECKING:
    from ._run import Unavailable

# The status word of a probe in flight (the notice's derived testing).
STATUS_PROBE = "probe_in_flight"

# -- the template language ----------------------------------------------------


class TemplateError(ValueError):
    """TemplateError is a template outside the defined syntax."""


@dataclass(frozen=True)
class _Tag:
    name: str
    filter: str  # "", "json" or "join"


@dataclass(frozen=True)
class _Section:
    name: str
    inverted: bool
    body: tuple[_Node, ...]


_Node = Union[str, _Tag, _Section]

_TAG = re.compile(r"\{\{(.*?)\}\}", re.S)
_INNER = re.compile(r"([#^/]?)([a-z_]+)(?:\|(json|join))?")


def parse(src: str) -> tuple[_Node, ...]:
    """parse reads a template; a tag outside the syntax is an error."""
    stack: list[tuple[str, bool, list[_Node]]] = [("", False, [])]
    pos = 0
    for m in _TAG.finditer(src):
        if m.start() > pos:
            stack[-1][2].append(src[pos : m.start()])
        pos = m.end()
        inner = _INNER.fullmatch(m.group(1))
        if inner is None:
            raise TemplateError(f"bad tag {m.group(0)!r} at byte {m.start()}")
        sigil, name, filt = inner.group(1), inner.group(2), inner.group(3) or ""
        if sigil in ("#", "^"):
            if filt:
                raise TemplateError(f"a section takes no filter: {m.group(0)!r}")
            stack.append((name, sigil == "^", []))
        elif sigil == "/":
            open_name, inverted, body = stack.pop() if len(stack) > 1 else ("", False, [])
            if open_name != name or filt:
                raise TemplateError(f"{m.group(0)!r} closes {open_name or 'nothing'}")
            stack[-1][2].append(_Section(name, inverted, tuple(body)))
        else:
            stack[-1][2].append(_Tag(name, filt))
    if len(stack) != 1:
        raise TemplateError(f"section {stack[-1][0]!r} is not closed")
    if pos < len(src):
        stack[0][2].append(src[pos:])
    return tuple(stack[0][2])


def _is_set(v: object) -> bool:
    return v is not None and v is not False and v != 0 and v != "" and v != []


def _lookup(scopes: Sequence[Mapping[str, Any]], name: str) -> object:
    for s in reversed(scopes):
        if name in s:
            return s[name]
    return None


def json_string(s: str) -> str:
    """json_string is the conformance escaping: only what JSON requires,
    with lower-case hex; everything else as its UTF-8 text."""
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif c < 0x20 or c == 0x7F:
            out.append(f"\\u{c:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _scalar(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _json(v: object) -> str:
    if isinstance(v, str):
        return json_string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(json_string(str(i)) for i in v) + "]"
    return _scalar(v)


def _render(nodes: Sequence[_Node], scopes: list[Mapping[str, Any]], out: list[str]) -> None:
    for n in nodes:
        if isinstance(n, str):
            out.append(n)
        elif isinstance(n, _Tag):
            v = _lookup(scopes, n.name)
            if n.filter == "json":
                out.append(_json(v))
            elif n.filter == "join":
                out.append(", ".join(str(i) for i in v) if isinstance(v, (list, tuple)) else _scalar(v))
            else:
                out.append(_scalar(v))
        else:
            v = _lookup(scopes, n.name)
            if n.inverted:
                if not _is_set(v):
                    _render(n.body, scopes, out)
            elif isinstance(v, (list, tuple)) and v and all(isinstance(i, Mapping) for i in v):
                for item in v:
                    _render(n.body, [*scopes, item], out)
            elif _is_set(v):
                _render(n.body, scopes, out)


def render(nodes: Sequence[_Node], inputs: Mapping[str, Any]) -> str:
    out: list[str] = []
    _render(nodes, [inputs], out)
    return "".join(out)


@functools.cache
def template(name: str) -> tuple[_Node, ...]:
    """template is one of the package's templates, parsed (a file's final
    newline is not part of it)."""
    src = importlib.resources.files("breakerd").joinpath("templates").joinpath(name + ".tmpl").read_text("utf-8")
    return parse(src[:-1] if src.endswith("\n") else src)


# -- the two texts -------------------------------------------------------------


def denial_inputs(d: Denial, tool: str, alternatives: Sequence[str], degraded: bool) -> dict[str, Any]:
    """denial_inputs is the template input for d, breakerd's denial of tool
    (whose policy's alternatives are alternatives), degraded when a
    fallback answered (conformance/README.md)."""
    return {
        "tool": tool,
        "status": d.status,
        "reason": d.reason,
        "forced": d.forced,
        "degraded": degraded,
        "scope": d.scope_word,
        "alternatives": [str(a) for a in alternatives],
        "may_return_at_ms": d.may_return_at_ms if 0 < d.may_return_at_ms < FOREVER else 0,
    }


def about(ms: int) -> str:
    """about is a duration in words ("1h5m", "2m30s", "45s"), ms >= 1000."""
    s = (ms + 500) // 1000
    if s >= 3600:
        s = ((s + 30) // 60) * 60
    parts = [(s // 3600, "h"), ((s % 3600) // 60, "m"), (s % 60, "s")]
    return "".join(f"{n}{u}" for n, u in parts if n)


def derive(d: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
    """derive adds the derived fields conformance/README.md defines to
    one denial's inputs."""
    out = dict(d)
    testing = d.get("status") == STATUS_PROBE
    may = int(d.get("may_return_at_ms", 0) or 0)
    in_ms = max(may - now_ms, 1000) if not testing and may > 0 else 0
    back_in = about(in_ms) if in_ms else ""
    out.update(
        reason=str(d.get("reason", "")).rstrip(". "),
        alternatives=list(d.get("alternatives", ()) or ()),
        parent=d.get("scope") == "parent",
        testing=testing,
        may_return_in_ms=in_ms,
        back_in=back_in,
        no_end=not testing and not back_in,
    )
    return out


def render_tool_result(d: Mapping[str, Any], now_ms: int) -> str:
    """render_tool_result renders the tool result over one denial's
    inputs at now_ms (ms since the epoch)."""
    return render(template("tool_result"), {"now_ms": now_ms, **derive(d, now_ms)})


def notice_of(denials: Sequence[Mapping[str, Any]], now_ms: int) -> str:
    """notice_of renders the notice over denials' inputs at now_ms; empty
    for none."""
    if not denials:
        return ""
    return render(template("notice"), {"denials": [derive(d, now_ms) for d in denials], "now_ms": now_ms})


def tool_result(d: Denial, tool: str, alternatives: Sequence[str], degraded: bool, now_ms: int) -> str:
    """tool_result is the text a model receives for d, at now_ms on the
    clock d's times are on."""
    return render_tool_result(denial_inputs(d, tool, alternatives, degraded), now_ms)


def notice(lost: Sequence[Unavailable], now_ms: int) -> str:
    """notice renders the run notice over the tools a run lost."""
    return notice_of([denial_inputs(u.denial, u.tool, u.alternatives, u.degraded) for u in lost], now_ms)


def tool_failure(tool: str) -> str:
    """tool_failure is the text a model receives for a call of tool that
    failed (the adapters' failure text): the tool_failure template."""
    return render(template("tool_failure"), {"tool": tool})
