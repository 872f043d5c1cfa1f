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

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from zuno.integrations.lsp.documents import read_source, to_character, uri_to_path

# The answers come as lsprotocol objects (see zuno.integrations.lsp.protocol), imported
# with the client that got them: the lsp tool imports this module before any server runs.
if TYPE_CHECKING:
    from lsprotocol import types

__all__ = [
    "MAX_ITEMS",
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


def parse_locations(answer: Iterable[types.Location]) -> list[Location]:
    """The places of a definition or references answer (sorted, each once, files only)."""
    found: set[Location] = set()
    for item in answer:
        path = uri_to_path(item.uri)
        if path is not None:
            found.add(Location(str(path), item.range.start.line, item.range.start.character))
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


def render_hover(hover: types.Hover | None) -> str | None:
    """The text of a hover answer, or None when it has none."""
    parts = _hover_parts(hover.contents) if hover is not None else []
    text = "\n".join(p for p in parts if p.strip())
    lines = [line for line in text.splitlines() if not line.strip().startswith("```")]
    cleaned = "\n".join(lines).strip()
    return cleaned or None


def _hover_parts(
    contents: types.MarkupContent | types.MarkedString | Sequence[types.MarkedString],
) -> list[str]:
    if isinstance(contents, str):
        return [contents]
    if isinstance(contents, Sequence):
        return [p for item in contents for p in _hover_parts(item)]
    return [contents.value]


def render_diagnostics(path: str, items: list[types.Diagnostic], sources: SourceLines) -> str:
    """``path:line:col severity message [code]`` per diagnostic, in file order."""
    shown = sources.shown(path)
    if not items:
        return f"No diagnostics for {shown}."
    rows: list[tuple[int, int, str]] = []
    counts: dict[str, int] = {}
    for item in items:
        start = item.range.start
        severity = _SEVERITIES.get(item.severity or 1, "error")
        counts[severity] = counts.get(severity, 0) + 1
        message = _one_line(item.message)
        code = item.code
        suffix = f" [{code}]" if code is not None and code != "" else ""
        col = sources.column(path, start.line, start.character)
        rows.append(
            (start.line, col, f"{shown}:{start.line + 1}:{col} {severity} {message}{suffix}")
        )
    rows.sort(key=lambda r: (r[0], r[1]))
    summary = ", ".join(f"{n} {name}{'s' if n != 1 else ''}" for name, n in counts.items())
    lines = [f"{shown}: {summary}", *(r[2] for r in rows[:MAX_ITEMS])]
    lines += _more(min(len(rows), MAX_ITEMS), len(rows))
    return "\n".join(lines)


def _one_line(message: str) -> str:
    """A multi-line message (a summary and its elaboration) as one line, parts joined by ';'."""
    parts = (" ".join(line.replace("\u00a0", " ").split()) for line in message.splitlines())
    return "; ".join(p for p in parts if p)


def _kind(kind: types.SymbolKind) -> str:
    """A symbol kind as listed: ``enum-member`` for ``SymbolKind.EnumMember``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", kind.name).lower()


def render_document_symbols(
    path: str,
    symbols: Sequence[types.DocumentSymbol] | Sequence[types.SymbolInformation],
    sources: SourceLines,
) -> str:
    """The symbols of one file as an indented tree (flat answers stay flat)."""
    shown = sources.shown(path)
    lines: list[str] = []
    total = _symbol_lines(symbols, path, sources, 0, lines)
    if total == 0:
        return f"No symbols in {shown}."
    out = [f"{shown}: {total} symbol{'s' if total != 1 else ''}", *lines[:MAX_ITEMS]]
    out += _more(min(total, MAX_ITEMS), total)
    return "\n".join(out)


def _symbol_lines(
    items: Iterable[types.DocumentSymbol | types.SymbolInformation],
    path: str,
    sources: SourceLines,
    depth: int,
    out: list[str],
) -> int:
    from lsprotocol import types  # already imported by the client that got the answer

    count = 0
    for item in items:
        if isinstance(item, types.DocumentSymbol):
            start, children = item.selection_range.start, item.children or []
        else:
            start, children = item.location.range.start, []
        col = sources.column(path, start.line, start.character)
        out.append(f"{'  ' * depth}{_kind(item.kind)} {item.name}  {start.line + 1}:{col}")
        count += 1
        if depth < _MAX_DEPTH:
            count += _symbol_lines(children, path, sources, depth + 1, out)
    return count


def render_workspace_symbols(
    query: str,
    symbols: Iterable[types.SymbolInformation | types.WorkspaceSymbol],
    sources: SourceLines,
) -> str:
    """``kind name  path:line:col`` per symbol matching ``query``, workspace files first."""
    from lsprotocol import types  # already imported by the client that got the answer

    rows: list[tuple[bool, str, Location, str]] = []
    for item in symbols:
        location = item.location
        path = uri_to_path(location.uri)
        if path is None:
            continue
        # A workspace symbol may name its file only, to be resolved later: its start then.
        if isinstance(location, types.Location):
            loc = Location(str(path), location.range.start.line, location.range.start.character)
        else:
            loc = Location(str(path), 0, 0)
        label = f"{_kind(item.kind)} {item.name}"
        if item.container_name:
            label += f" (in {item.container_name})"
        outside = sources.shown(str(path)).startswith("/")
        rows.append((outside, sources.shown(str(path)), loc, label))
    if not rows:
        return f"No symbols match {query!r}."
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    lines = [f"{len(rows)} symbol{'s' if len(rows) != 1 else ''} match {query!r}:"]
    lines += [f"{label}  {sources.place(loc)}" for _, _, loc, label in rows[:MAX_ITEMS]]
    lines += _more(min(len(rows), MAX_ITEMS), len(rows))
    return "\n".join(lines)
