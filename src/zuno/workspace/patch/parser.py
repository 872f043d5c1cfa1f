"""Parsing patch text into typed operations.

The parser does no I/O: it only checks the grammar. Every error names the
1-based line of the patch text it refers to, so a model can find and fix it.
Parsing is lenient where models are known to drift (a heredoc wrapper, a
unified-diff ``@@ -1,3 +1,4 @@`` header, blank lines between operations) and
strict everywhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zuno.workspace.patch.model import (
    AddFile,
    BodyLine,
    Chunk,
    DeleteFile,
    LineKind,
    Operation,
    Patch,
    PatchError,
    UpdateFile,
)

__all__ = ["VALID_HEADERS", "parse_patch"]

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File:"
DELETE = "*** Delete File:"
UPDATE = "*** Update File:"
MOVE = "*** Move to:"
END_OF_FILE = "*** End of File"

VALID_HEADERS = (
    "'*** Add File: PATH', '*** Delete File: PATH', "
    "'*** Update File: PATH' (optionally followed by '*** Move to: PATH')"
)
"""The valid operation headers, as quoted in error messages."""

# `apply_patch <<'EOF'`, `<<EOF`, `<<"EOF"`, also `<<-EOF`: the word is the terminator.
_HEREDOC = re.compile(r"""^(?:apply_patch\s*)?<<-?\s*(['"]?)([A-Za-z_][A-Za-z0-9_]*)\1$""")
# A unified-diff hunk header; the text after its closing @@ is a context line.
_UNIFIED = re.compile(r"^@@\s*-\d+(?:,\d+)?\s+\+\d+(?:,\d+)?\s*@@\s?(.*)$")
_PREFIXES: dict[str, LineKind] = {" ": " ", "-": "-", "+": "+"}


@dataclass(slots=True)
class _Cursor:
    """The lines between the markers, and where the parser is among them."""

    lines: list[str]
    first_number: int
    """The patch line number of ``lines[0]``."""
    index: int = 0

    def number(self, index: int | None = None) -> int:
        return self.first_number + (self.index if index is None else index)

    def done(self) -> bool:
        return self.index >= len(self.lines)

    def peek(self) -> str:
        return self.lines[self.index]


def parse_patch(text: str) -> Patch:
    """Parse a patch.

    Args:
        text: The patch text, possibly wrapped in a heredoc or a whole
            ``apply_patch <<'EOF' ... EOF`` invocation.

    Returns:
        The operations, in the order written.

    Raises:
        PatchError: The text is not a valid patch; the message gives the line.
    """
    cursor = _unwrap(text)
    operations: list[Operation] = []
    while not cursor.done():
        line = cursor.peek()
        stripped = line.strip()
        if not stripped:
            # Blank lines between operations carry nothing; models often add them.
            cursor.index += 1
        elif stripped.startswith(ADD):
            operations.append(_parse_add(cursor, _header_path(cursor, ADD)))
        elif stripped.startswith(DELETE):
            path = _header_path(cursor, DELETE)
            operations.append(DeleteFile(path, cursor.number()))
            cursor.index += 1
        elif stripped.startswith(UPDATE):
            operations.append(_parse_update(cursor, _header_path(cursor, UPDATE)))
        elif stripped == END:
            raise PatchError(
                f"line {cursor.number()}: '{END}' appears before the end of the patch; "
                "send one patch with a single '*** Begin Patch' ... '*** End Patch' envelope"
            )
        else:
            raise PatchError(
                f"line {cursor.number()}: {line!r} is not a valid file operation header; "
                f"expected one of {VALID_HEADERS}"
            )
    if not operations:
        raise PatchError("the patch is empty: it has no file operation; nothing was changed")
    return Patch(tuple(operations))


def _unwrap(text: str) -> _Cursor:
    """Remove tolerated wrappers and the envelope; return the lines inside it."""
    lines = text.replace("\r\n", "\n").split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise PatchError(f"the patch is empty; it must start with '{BEGIN}' and end with '{END}'")
    last = max(i for i, line in enumerate(lines) if line.strip())
    heredoc = _HEREDOC.match(lines[first].strip())
    if heredoc is not None:
        first = _next_nonblank(lines, first + 1, last)
        if first <= last and lines[last].strip() == heredoc.group(2):
            last = _previous_nonblank(lines, last - 1, first)
        if first > last:
            raise PatchError("the patch is empty: the heredoc holds no patch")
    begin_ok = lines[first].strip() == BEGIN
    end_ok = first < last and lines[last].strip() == END
    if not begin_ok and not end_ok:
        raise PatchError(
            f"the patch must start with '{BEGIN}' and end with '{END}'; both are missing "
            f"(line {first + 1} is {lines[first]!r})"
        )
    if not begin_ok:
        raise PatchError(f"the first line must be '{BEGIN}'; line {first + 1} is {lines[first]!r}")
    if not end_ok:
        raise PatchError(f"the last line must be '{END}'; line {last + 1} is {lines[last]!r}")
    return _Cursor(lines[first + 1 : last], first_number=first + 2)


def _next_nonblank(lines: list[str], start: int, stop: int) -> int:
    while start <= stop and not lines[start].strip():
        start += 1
    return start


def _previous_nonblank(lines: list[str], start: int, stop: int) -> int:
    while start >= stop and not lines[start].strip():
        start -= 1
    return start


def _header_path(cursor: _Cursor, header: str) -> str:
    path = cursor.peek().strip()[len(header) :].strip()
    if not path:
        raise PatchError(f"line {cursor.number()}: '{header} PATH' is missing its path")
    return path


def _is_header(line: str) -> bool:
    """Whether a body line ends the current operation (the next header, or any ``***`` line).

    Only a line that starts with ``***`` counts: a body line with content
    ``*** ...`` carries its prefix (`` *** ...``), so it is never mistaken for one.
    """
    return line.startswith("***")


def _parse_add(cursor: _Cursor, path: str) -> AddFile:
    header_number = cursor.number()
    cursor.index += 1
    content: list[str] = []
    while not cursor.done():
        line = cursor.peek()
        if line.startswith("+"):
            content.append(line[1:] + "\n")
        elif _is_header(line):
            break
        elif not line.strip() and _only_blanks_until_header(cursor):
            # Trailing blank lines before the next operation are separators, not content.
            break
        else:
            raise PatchError(
                f"line {cursor.number()}: in '{ADD} {path}' every line must start with '+'; "
                f"got {line!r}"
            )
        cursor.index += 1
    return AddFile(path, "".join(content), header_number)


def _only_blanks_until_header(cursor: _Cursor) -> bool:
    for line in cursor.lines[cursor.index :]:
        if line.strip():
            return _is_header(line)
    return True


def _parse_update(cursor: _Cursor, path: str) -> UpdateFile:
    header_number = cursor.number()
    cursor.index += 1
    move_to: str | None = None
    if not cursor.done() and cursor.peek().strip().startswith(MOVE):
        move_to = _header_path(cursor, MOVE)
        cursor.index += 1
    chunks: list[Chunk] = []
    while not cursor.done() and not _is_header(cursor.peek()):
        chunks.append(_parse_chunk(cursor, path, first=not chunks))
    if not chunks:
        raise PatchError(
            f"line {header_number}: '{UPDATE} {path}' has no chunk; add at least one "
            "chunk ('@@' then lines starting with ' ', '-' or '+'), or remove the operation"
        )
    return UpdateFile(path, move_to, tuple(chunks), header_number)


def _parse_chunk(cursor: _Cursor, path: str, *, first: bool) -> Chunk:
    start = cursor.number()
    contexts: list[str] = []
    has_header = False
    while not cursor.done() and cursor.peek().startswith("@@"):
        has_header = True
        context = _context_of(cursor.peek())
        if context is not None:
            contexts.append(context)
        cursor.index += 1
    if not has_header and not first:
        raise PatchError(
            f"line {start}: in '{UPDATE} {path}' a chunk after '{END_OF_FILE}' must start "
            f"with '@@'; got {cursor.peek()!r}"
        )
    body: list[BodyLine] = []
    end_of_file = False
    while not cursor.done():
        line = cursor.peek()
        if line.startswith("@@"):
            break
        if line.rstrip() == END_OF_FILE:
            end_of_file = True
            cursor.index += 1
            break
        if _is_header(line):
            break
        if line == "":
            body.append(BodyLine(" ", ""))
        elif line[0] in _PREFIXES:
            body.append(BodyLine(_PREFIXES[line[0]], line[1:]))
        else:
            raise PatchError(
                f"line {cursor.number()}: in '{UPDATE} {path}' the line {line!r} must start "
                "with ' ' (context), '-' (removed) or '+' (added)"
            )
        cursor.index += 1
    if not body:
        raise PatchError(
            f"line {start}: a chunk of '{UPDATE} {path}' has no lines; after '@@' give lines "
            "starting with ' ' (context), '-' (removed) or '+' (added)"
        )
    return Chunk(tuple(contexts), tuple(body), end_of_file, start)


def _context_of(line: str) -> str | None:
    """The context text of an ``@@`` line, or None for a bare ``@@``."""
    unified = _UNIFIED.match(line)
    rest = unified.group(1) if unified is not None else line[2:]
    if not rest.strip():
        return None
    return rest[1:] if rest.startswith(" ") else rest
