"""Language-server answers rendered as compact text for a model.

- locations: ``path:line:col  <source line>``, workspace-relative, sorted;
- hover: the server's text, code fences removed;
- diagnostics: ``path:line:col severity message [code]``, one per line;
- symbols: an indented tree, ``kind name  line:col``.

Lines and columns are 1-based and columns count characters, whatever the
server's UTF-16 offsets. Every list stops at a stated maximum and says how many
entries were left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zuno.integrations.lsp.documents import read_source, to_character, uri_to_path
from zuno.integrations.lsp.framing import json_array, json_object

__all__ = [
    "MAX_ITEMS",
    "SYMBOL_KINDS",
    "Location",
    "SourceLines",
    "parse_locations",
    "render_diagnostics",
    "render_document_symbols",
    "render_hover",
    "render_locations",
    "render_workspace_symbols",
]

MAX_ITEMS = 200
"""Most locations, diagnostics or symbols listed in one answer."""
_MAX_SOURCE_CHARS = 160
_MAX_DEPTH = 8

SYMBOL_KINDS: dict[int, str] = {
    1: "file",
    2: "module",
    3: "namespace",
    4: "package",
    5: "class",
    6: "method",
    7: "property",
    8: "field",
    9: "constructor",
    10: "enum",
    11: "interface",
    12: "function",
    13: "variable",
    14: "constant",
    15: "string",
    16: "number",
    17: "boolean",
    18: "array",
    19: "object",
    20: "key",
    21: "null",
    22: "enum-member",
    23: "struct",
    24: "event",
    25: "operator",
    26: "type-parameter",
}
_SEVERITIES = {1: "error", 2: "warning", 3: "info", 4: "hint"}


@dataclass(frozen=True, slots=True, order=True)
class Location:
    """A place in a file: 0-based line and UTF-16 character, as the server said it."""

    path: str
    line: int
    character: int


@dataclass(slots=True)
class SourceLines:
    """Reads files once per answer to quote lines and convert columns."""

    workspace: Path
    _cache: dict[str, list[str] | None] = field(default_factory=lambda: {})

    def text(self, path: str, line: int) -> str | None:
        """The 0-based ``line`` of ``path``, or None when it cannot be read."""
        if path not in self._cache:
            try:
                self._cache[path] = read_source(Path(path)).splitlines()
            except (OSError, ValueError):
                self._cache[path] = None
        lines = self._cache[path]
        if lines is None or not 0 <= line < len(lines):
            return None
        return lines[line]

    def column(self, path: str, line: int, character: int) -> int:
        """The 1-based character column of a server position."""
        text = self.text(path, line)
        return to_character(text, character) if text is not None else character + 1

    def shown(self, path: str) -> str:
        """``path`` relative to the workspace when inside it, else absolute."""
        p = Path(path)
        for root in (self.workspace, self.workspace.resolve()):
            try:
                return p.relative_to(root).as_posix()
            except ValueError:
                continue
        return p.as_posix()

    def place(self, loc: Location) -> str:
        """``path:line:col`` of a location."""
        col = self.column(loc.path, loc.line, loc.character)
        return f"{self.shown(loc.path)}:{loc.line + 1}:{col}"


def _start(range_: Any) -> tuple[int, int] | None:
    """The start of an LSP range as (line, character), or None when malformed."""
    start = json_object(json_object(range_).get("start"))
    line, character = start.get("line"), start.get("character")
    if isinstance(line, int) and isinstance(character, int):
        return max(0, line), max(0, character)
    return None


def parse_locations(result: Any) -> list[Location]:
    """Locations from a ``Location``, ``Location[]`` or ``LocationLink[]`` answer (sorted)."""
    items = json_array(result) if isinstance(result, list) else [result]
    found: set[Location] = set()
    for item in map(json_object, items):
        uri = item.get("uri", item.get("targetUri"))
        range_ = item.get("range", item.get("targetSelectionRange"))
        start = _start(range_)
        path = uri_to_path(uri) if isinstance(uri, str) else None
        if path is not None and start is not None:
            found.add(Location(str(path), *start))
    return sorted(found)


def _more(shown: int, total: int) -> list[str]:
    return [f"... {total - shown} more not shown (at most {MAX_ITEMS} are listed)"] * (
        total > shown
    )


def render_locations(locations: list[Location], sources: SourceLines, what: str) -> str:
    """``N <what>:`` then one ``path:line:col  source`` line per location."""
    noun = what if len(locations) != 1 else what.removesuffix("s")
    lines = [f"{len(locations)} {noun}:"]
    for loc in locations[:MAX_ITEMS]:
        source = sources.text(loc.path, loc.line)
        quoted = ""
        if source is not None and source.strip():
            quoted = "  " + _cut(source.strip())
        lines.append(sources.place(loc) + quoted)
    lines += _more(min(len(locations), MAX_ITEMS), len(locations))
    return "\n".join(lines)


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_SOURCE_CHARS else text[: _MAX_SOURCE_CHARS - 3] + "..."


def render_hover(result: Any) -> str | None:
    """The text of a hover answer, or None when it has none."""
    parts = _hover_parts(json_object(result).get("contents"))
    text = "\n".join(p for p in parts if p.strip())
    lines = [line for line in text.splitlines() if not line.strip().startswith("```")]
    cleaned = "\n".join(lines).strip()
    return cleaned or None


def _hover_parts(contents: Any) -> list[str]:
    if isinstance(contents, str):
        return [contents]
    if isinstance(contents, list):
        return [p for item in json_array(contents) for p in _hover_parts(item)]
    value = json_object(contents).get("value")
    return [value] if isinstance(value, str) else []


def render_diagnostics(path: str, items: list[dict[str, Any]], sources: SourceLines) -> str:
    """``path:line:col severity message [code]`` per diagnostic, in file order."""
    shown = sources.shown(path)
    if not items:
        return f"No diagnostics for {shown}."
    rows: list[tuple[int, int, str]] = []
    for item in items:
        start = _start(item.get("range")) or (0, 0)
        severity = _SEVERITIES.get(item.get("severity", 1), "error")
        message = _one_line(str(item.get("message", "")))
        code = item.get("code")
        suffix = f" [{code}]" if isinstance(code, (str, int)) and code != "" else ""
        col = sources.column(path, *start)
        rows.append((start[0], col, f"{shown}:{start[0] + 1}:{col} {severity} {message}{suffix}"))
    rows.sort(key=lambda r: (r[0], r[1]))
    counts: dict[str, int] = {}
    for item in items:
        name = _SEVERITIES.get(item.get("severity", 1), "error")
        counts[name] = counts.get(name, 0) + 1
    summary = ", ".join(f"{n} {name}{'s' if n != 1 else ''}" for name, n in counts.items())
    lines = [f"{shown}: {summary}", *(r[2] for r in rows[:MAX_ITEMS])]
    lines += _more(min(len(rows), MAX_ITEMS), len(rows))
    return "\n".join(lines)


def _one_line(message: str) -> str:
    """A multi-line message (a summary and its elaboration) as one line, parts joined by ';'."""
    parts = (" ".join(line.replace("\u00a0", " ").split()) for line in message.splitlines())
    return "; ".join(p for p in parts if p)


def _kind(value: Any) -> str:
    return SYMBOL_KINDS.get(value, "symbol") if isinstance(value, int) else "symbol"


def render_document_symbols(path: str, result: Any, sources: SourceLines) -> str:
    """The symbols of one file as an indented tree (flat answers stay flat)."""
    shown = sources.shown(path)
    lines: list[str] = []
    total = _symbol_lines(json_array(result), path, sources, 0, lines)
    if total == 0:
        return f"No symbols in {shown}."
    out = [f"{shown}: {total} symbol{'s' if total != 1 else ''}", *lines[:MAX_ITEMS]]
    out += _more(min(total, MAX_ITEMS), total)
    return "\n".join(out)


def _symbol_lines(
    items: Iterable[Any], path: str, sources: SourceLines, depth: int, out: list[str]
) -> int:
    count = 0
    for item in map(json_object, items):
        if not item:
            continue
        name = str(item.get("name", "?"))
        # DocumentSymbol has selectionRange; SymbolInformation has location.range.
        range_ = item.get("selectionRange") or json_object(item.get("location")).get("range")
        start = _start(range_) or (0, 0)
        col = sources.column(path, *start)
        out.append(f"{'  ' * depth}{_kind(item.get('kind'))} {name}  {start[0] + 1}:{col}")
        count += 1
        if depth < _MAX_DEPTH:
            children = json_array(item.get("children"))
            count += _symbol_lines(children, path, sources, depth + 1, out)
    return count


def render_workspace_symbols(query: str, result: Any, sources: SourceLines) -> str:
    """``kind name  path:line:col`` per symbol matching ``query``, workspace files first."""
    rows: list[tuple[bool, str, Location, str]] = []
    for item in map(json_object, json_array(result)):
        location = json_object(item.get("location"))
        uri = location.get("uri")
        path = uri_to_path(uri) if isinstance(uri, str) else None
        if path is None:
            continue
        start = _start(location.get("range")) or (0, 0)
        loc = Location(str(path), *start)
        container = item.get("containerName")
        label = f"{_kind(item.get('kind'))} {item.get('name', '?')}"
        if isinstance(container, str) and container:
            label += f" (in {container})"
        outside = sources.shown(str(path)).startswith("/")
        rows.append((outside, sources.shown(str(path)), loc, label))
    if not rows:
        return f"No symbols match {query!r}."
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    lines = [f"{len(rows)} symbol{'s' if len(rows) != 1 else ''} match {query!r}:"]
    lines += [f"{label}  {sources.place(loc)}" for _, _, loc, label in rows[:MAX_ITEMS]]
    lines += _more(min(len(rows), MAX_ITEMS), len(rows))
    return "\n".join(lines)
