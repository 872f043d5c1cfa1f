"""Unified diffs of patch operations, for the approval prompt.

An update's diff is built from its placements rather than by comparing the
two versions: the engine already knows exactly which lines each chunk keeps,
removes and adds, and a general diff of a large file would be slow.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field

from zuno.workspace.patch.locating import Placement

__all__ = ["added_file_diff", "deleted_file_diff", "replaced_file_diff", "update_diff"]

_CONTEXT = 3


def added_file_diff(path: str, lines: Sequence[str]) -> str:
    """The diff that creates ``path`` with ``lines``."""
    head = f"--- /dev/null\n+++ b/{path}\n"
    if not lines:
        return head
    return head + f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines)


def deleted_file_diff(path: str, lines: Sequence[str]) -> str:
    """The diff that removes ``path``, whose content is ``lines``."""
    head = f"--- a/{path}\n+++ /dev/null\n"
    if not lines:
        return head
    return head + f"@@ -1,{len(lines)} +0,0 @@\n" + "".join(f"-{line}\n" for line in lines)


def replaced_file_diff(path: str, old: Sequence[str], new: Sequence[str]) -> str:
    """The diff of a whole-file replacement (an added file over an existing one)."""
    text = "".join(
        f"{line}\n"
        for line in difflib.unified_diff(
            list(old), list(new), f"a/{path}", f"b/{path}", lineterm="", n=_CONTEXT
        )
    )
    return text or f"--- a/{path}\n+++ b/{path}\n"


@dataclass(slots=True)
class _Block:
    """A changed region: old lines ``[start, end)`` and its diff lines."""

    start: int
    end: int
    lines: list[str] = field(default_factory=lambda: [])
    delta: int = 0
    """Added minus removed lines."""


def update_diff(
    old_path: str, new_path: str, lines: Sequence[str], placements: Sequence[Placement]
) -> str:
    """The diff of an update whose chunks were placed in ``lines``."""
    head = f"--- a/{old_path}\n+++ b/{new_path}\n"
    blocks = [b for b in (_block(lines, p) for p in placements) if b is not None]
    out = [head]
    offset = 0  # new minus old line numbers, from the blocks already shown
    i = 0
    while i < len(blocks):
        # Blocks closer than twice the context share one hunk.
        j = i
        while j + 1 < len(blocks) and blocks[j + 1].start - blocks[j].end <= 2 * _CONTEXT:
            j += 1
        group = blocks[i : j + 1]
        first = max(0, group[0].start - _CONTEXT)
        last = min(len(lines), group[-1].end + _CONTEXT)
        body = [f" {line}" for line in lines[first : group[0].start]]
        for k, block in enumerate(group):
            body.extend(block.lines)
            stop = group[k + 1].start if k + 1 < len(group) else last
            body.extend(f" {line}" for line in lines[block.end : stop])
        old_count = sum(1 for b in body if b[0] != "+")
        new_count = sum(1 for b in body if b[0] != "-")
        old_start = first + 1 if old_count else first
        new_start = first + offset + 1 if new_count else first + offset
        out.append(f"@@ -{old_start},{old_count} +{new_start},{new_count} @@\n")
        out.extend(f"{b}\n" for b in body)
        offset += sum(b.delta for b in group)
        i = j + 1
    return "".join(out)


def _block(lines: Sequence[str], placement: Placement) -> _Block | None:
    """The changed region of one placement, without its leading and trailing context."""
    body = list(placement.body)
    start = placement.start
    while body and body[0].kind == " ":
        body.pop(0)
        start += 1
    while body and body[-1].kind == " ":
        body.pop()
    if not body:
        return None
    block = _Block(start, start)
    i = start
    for body_line in body:
        if body_line.kind == " ":
            block.lines.append(f" {lines[i]}")
            i += 1
        elif body_line.kind == "-":
            block.lines.append(f"-{lines[i]}")
            block.delta -= 1
            i += 1
        else:
            block.lines.append(f"+{body_line.text}")
            block.delta += 1
    block.end = i
    return block
