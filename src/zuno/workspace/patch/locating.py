"""Placing the chunks of an update in a file, and applying them.

Chunks are sought in order, each from where the previous one ended. A chunk's
``@@ CONTEXT`` lines are found first, one after the other; its old lines are
then sought after the last of them. Where the old lines match at several places
at the first level that matches and no ``@@`` context narrows the search, the
chunk is refused as ambiguous rather than silently applied to the first one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zuno.workspace.patch.matching import LineIndex, MatchLevel
from zuno.workspace.patch.model import BodyLine, Chunk, PatchError
from zuno.workspace.patch.textfile import TextFile

__all__ = ["Placement", "apply_placements", "place_chunks"]

_QUOTED_CANDIDATES = 10


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one chunk applies.

    Attributes:
        start: The 0-based file line where the chunk's old lines begin (or where
            a pure addition is inserted).
        body: The body lines applied there (possibly without trailing blank
            context lines that the file does not have).
    """

    start: int
    body: tuple[BodyLine, ...]

    @property
    def old_count(self) -> int:
        """How many file lines the chunk consumes."""
        return sum(1 for b in self.body if b.kind != "+")


def place_chunks(lines: Sequence[str], chunks: Sequence[Chunk], path: str) -> list[Placement]:
    """Locate every chunk of an update in ``lines``.

    Args:
        lines: The file's lines before the update.
        chunks: The update's chunks, in patch order.
        path: The file's path as written in the patch, for error messages.

    Returns:
        The placements, sorted by position (they never overlap).

    Raises:
        PatchError: A context line or a chunk's old lines were not found, or
            matched ambiguously.
    """
    index = LineIndex(lines)
    cursor = 0
    placements: list[Placement] = []
    for chunk in chunks:
        placement, cursor = _place(index, chunk, cursor, path)
        placements.append(placement)
    # Pure additions without context go to the end without moving the cursor,
    # so later chunks may still sit before them; sorting is stable.
    placements.sort(key=lambda p: p.start)
    return placements


def _place(index: LineIndex, chunk: Chunk, cursor: int, path: str) -> tuple[Placement, int]:
    """One chunk's placement and the cursor after it."""
    position = cursor
    context_at: int | None = None
    for context in chunk.contexts:
        found = _first_match(index, [context], position)
        if found is None:
            raise PatchError(
                f"{path}: the context line of the chunk at patch line {chunk.line} was not "
                f"found (searched from file line {position + 1} to the end):\n    {context}"
            )
        context_at, position = found, found + 1
    if not chunk.old_lines:
        if chunk.end_of_file or context_at is None:
            return Placement(len(index), chunk.body), cursor
        return Placement(position, chunk.body), position
    for body in _body_variants(chunk.body):
        old = [b.text for b in body if b.kind != "+"]
        start = _find_old(index, chunk, old, position, path)
        if start is None and context_at is not None and _matches_somehow(index, old, context_at):
            # The model repeated the @@ context as the chunk's first line.
            start = context_at
        if start is not None:
            return Placement(start, body), start + len(old)
    raise _not_found(index, chunk, position, path)


def _body_variants(body: tuple[BodyLine, ...]) -> list[tuple[BodyLine, ...]]:
    """The body, then the body without trailing blank context lines (models add them)."""
    trimmed = body
    while trimmed and trimmed[-1] == BodyLine(" ", ""):
        trimmed = trimmed[:-1]
    if trimmed == body or not any(b.kind != "+" for b in trimmed):
        return [body]
    return [body, trimmed]


def _find_old(
    index: LineIndex, chunk: Chunk, old: list[str], position: int, path: str
) -> int | None:
    if chunk.end_of_file:
        start = len(index) - len(old)
        if start >= position and _matches_somehow(index, old, start):
            return start
        return None
    for level in MatchLevel:
        found = index.find(old, position, level, limit=2)
        if not found:
            continue
        if len(found) > 1 and not chunk.contexts:
            many = index.find(old, position, level, limit=_QUOTED_CANDIDATES + 1)
            raise _ambiguous(chunk, many, old, path)
        return found[0]
    return None


def _first_match(index: LineIndex, pattern: list[str], position: int) -> int | None:
    for level in MatchLevel:
        found = index.find(pattern, position, level)
        if found:
            return found[0]
    return None


def _matches_somehow(index: LineIndex, pattern: list[str], position: int) -> bool:
    return any(index.matches_at(pattern, position, level) for level in MatchLevel)


def _quote(lines: Sequence[str]) -> str:
    return "\n".join(f"    {line}" for line in lines)


def _ambiguous(chunk: Chunk, starts: list[int], old: list[str], path: str) -> PatchError:
    shown = ", ".join(str(s + 1) for s in starts[:_QUOTED_CANDIDATES])
    more = " and more" if len(starts) > _QUOTED_CANDIDATES else ""
    return PatchError(
        f"{path}: the chunk at patch line {chunk.line} is ambiguous: its lines match at file "
        f"lines {shown}{more}. Add surrounding context lines or an '@@ CONTEXT' line "
        f"(such as the enclosing function) so that it matches one place:\n{_quote(old)}"
    )


def _not_found(index: LineIndex, chunk: Chunk, position: int, path: str) -> PatchError:
    old = chunk.old_lines
    where = "at the end of the file" if chunk.end_of_file else f"from file line {position + 1}"
    hint = ""
    earlier = _first_match(index, old, 0)
    if earlier is not None and earlier < position:
        hint = (
            f"\nThese lines occur at file line {earlier + 1}, before the previous chunk or "
            "context: chunks of one file must follow the file's order."
        )
    elif chunk.end_of_file and _first_match(index, old, position) is not None:
        hint = "\nThey occur elsewhere in the file: remove '*** End of File' from this chunk."
    return PatchError(
        f"{path}: the lines of the chunk at patch line {chunk.line} were not found "
        f"(searched {where}):\n{_quote(old)}{hint}\n"
        "Read the file again and copy the lines exactly."
    )


def apply_placements(file: TextFile, placements: Sequence[Placement]) -> TextFile:
    """The file after applying located chunks.

    Context lines keep the file's own text (a forgiving match never rewrites
    them); removed lines go; added lines take the patch's text, and the ending
    of the removed line they replace (in a file of mixed endings), else the
    file's dominant one.
    """
    lines = file.lines
    eols = file.line_eols
    out: list[str] = []
    out_eols: list[str] | None = [] if eols is not None else None
    done = 0
    for placement in placements:
        out.extend(lines[done : placement.start])
        if eols is not None and out_eols is not None:
            out_eols.extend(eols[done : placement.start])
        i = placement.start
        removed: list[str] = []  # the endings of the lines just removed, in order
        for body_line in placement.body:
            if body_line.kind == " ":
                out.append(lines[i])
                if eols is not None and out_eols is not None:
                    out_eols.append(eols[i])
                i += 1
                removed.clear()
            elif body_line.kind == "-":
                if eols is not None:
                    removed.append(eols[i])
                i += 1
            else:
                out.append(body_line.text)
                if out_eols is not None:
                    # A line that replaces a removed one keeps that line's ending.
                    out_eols.append(removed.pop(0) if removed else file.eol)
        done = i
    out.extend(lines[done:])
    if eols is not None and out_eols is not None:
        out_eols.extend(eols[done:])
    return file.with_lines(out, out_eols)
