"""The ``edit`` tool: replace an exact string in one file.

A registered slot, not on the default surface (apply_patch plus write is the
default editing path). The replacement is exact: a missing ``old_string`` is
refused (with a hint when the text exists with different whitespace or
punctuation), and so is one that occurs several times unless ``replace_all``
says so. The file's line endings, byte-order mark and final-newline state are
kept; the write is atomic (see :mod:`zuno.workspace.patch.commit`). The file is read and
written relative to its root without following a symlink out of it (see
:mod:`zuno.workspace.beneath`); in ``read-only`` sandbox mode the tool refuses to run.
The edit needs no prior read: it is anchored on ``old_string``, and written only
while the file still holds the bytes it was matched in (see
:mod:`zuno.durability.file_versions`).

edit keeps the strict default declaration (SideEffecting / Never / Exclusive).
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass

import anyio.to_thread
from pydantic import Field

from zuno.contract.tool import (
    ArgumentsRejected,
    PathOutsideWorkspace,
    Tool,
    ToolArgs,
    ToolContext,
    ToolError,
    ToolResult,
    UncertainOutcome,
)
from zuno.dispatch.landing import LandingGuard, landing_guard
from zuno.durability.file_versions import FileChanged, claim_writes
from zuno.workspace.beneath import Beneath, Confined, EscapesRoot
from zuno.workspace.patch.commit import ChangedMeanwhile, FileChange, commit_changes
from zuno.workspace.patch.matching import ascii_punctuation
from zuno.workspace.patch.model import PatchWriteError
from zuno.workspace.patch.textfile import BOM, TextFile

__all__ = ["EditArgs", "EditTool"]

_SHOWN_LINES = 10


class EditArgs(ToolArgs):
    """Arguments of ``edit``."""

    path: str = Field(
        min_length=1,
        description="The file to edit, inside the workspace or a configured writable root.",
    )
    old_string: str = Field(
        description="The exact text to replace, including whitespace and indentation."
    )
    new_string: str = Field(description="The text to put in its place.")
    replace_all: bool = Field(
        default=False,
        description="Replace every occurrence; otherwise old_string must occur exactly once.",
    )


@dataclass(frozen=True, slots=True)
class _Edit:
    change: FileChange
    lines: list[int]
    """1-based lines where the replaced occurrences started."""


class EditTool(Tool[EditArgs]):
    """Replace an exact string in a file, keeping its line endings."""

    name = "edit"
    description = (
        "Replace old_string with new_string in one file. old_string must match the file "
        "exactly (whitespace and indentation included) and occur exactly once, unless "
        "replace_all is true. If the file changes between the match and the write, nothing "
        "is written (try again). Include enough surrounding lines to make old_string "
        "unique. Line endings (LF/CRLF) are kept."
    )
    writes_files = True
    args_model = EditArgs
    rule_argument = "path"
    rule_match = "path"

    async def run(self, args: EditArgs, ctx: ToolContext) -> ToolResult:
        """Make the replacement; raise :class:`ToolError` with the reason on failure."""
        path = ctx.resolve_writable(args.path)
        edit = await anyio.to_thread.run_sync(_plan_edit, path, args)
        try:
            guard = landing_guard(ctx, self.name)
            await anyio.to_thread.run_sync(_commit, ctx, edit.change, guard)
        except ChangedMeanwhile as error:
            raise FileChanged(f"edit {args.path}: {error}") from error
        except EscapesRoot as error:
            raise PathOutsideWorkspace(f"{args.path}: {error}; nothing was changed") from error
        except PatchWriteError as error:
            if not error.restored:
                raise UncertainOutcome(f"edit {args.path}: {error}") from error
            raise ToolError(f"edit {args.path}: {error}") from error
        count = len(edit.lines)
        where = ", ".join(str(n) for n in edit.lines[:_SHOWN_LINES])
        more = " and more" if count > _SHOWN_LINES else ""
        noun = "occurrence" if count == 1 else "occurrences"
        return ToolResult(
            f"Edited {args.path}: replaced {count} {noun} (line {where}{more}).",
            data={"path": args.path, "replacements": count, "lines": edit.lines},
        )


def _commit(ctx: ToolContext, change: FileChange, guard: LandingGuard) -> None:
    """Write the change if this session has seen the file as it is now."""
    with claim_writes(ctx, [change.path.path]) as claim:
        commit_changes([change], guard, claim)


def _plan_edit(path: Confined, args: EditArgs) -> _Edit:
    """Compute the edited bytes, refusing anything ambiguous. Writes nothing."""
    if args.old_string == "":
        raise ArgumentsRejected(
            "old_string is empty; give the exact text to replace "
            "(to create a file or replace it whole, use the write tool)"
        )
    if args.old_string == args.new_string:
        raise ArgumentsRejected(
            "old_string and new_string are identical; there is nothing to change"
        )
    data, mode = _read(path, args.path)
    file = TextFile.decode(data)
    if file.line_eols is None:
        # A uniform file is edited in LF form, so the model's "\n" matches CRLF lines.
        text = file.text()
        old = args.old_string.replace("\r\n", "\n")
        new = args.new_string.replace("\r\n", "\n")
    else:
        raw = data[len(BOM) :] if file.bom else data
        text = raw.decode("utf-8", "surrogateescape")
        old, new = args.old_string, args.new_string
    starts = _occurrences(text, old)
    if not starts:
        raise ArgumentsRejected(_not_found(text, old, args.path))
    if len(starts) > 1 and not args.replace_all:
        lines = ", ".join(str(_line_of(text, s)) for s in starts[:_SHOWN_LINES])
        more = " and more" if len(starts) > _SHOWN_LINES else ""
        raise ArgumentsRejected(
            f"old_string occurs {len(starts)} times in {args.path} (lines {lines}{more}); "
            "include more surrounding lines to make it unique, or set replace_all to true"
        )
    if not args.replace_all:
        starts = starts[:1]
    edited = text.replace(old, new, -1 if args.replace_all else 1)
    if file.line_eols is None:
        final_newline = edited.endswith("\n")
        lines_after = edited.split("\n")
        if final_newline:
            lines_after.pop()
        result = TextFile(lines_after if edited else [], file.eol, file.bom, final_newline)
        new_data = result.encode()
    else:
        new_data = (BOM if file.bom else b"") + edited.encode("utf-8", "surrogateescape")
    # Anchored on old_string: written only while the file still holds ``data``.
    change = FileChange(path, new_data, data, mode, anchored=True)
    return _Edit(change, [_line_of(text, s) for s in starts])


def _read(path: Confined, shown: str) -> tuple[bytes, int]:
    try:
        with Beneath(path.root) as root:
            spot = root.locate(path.rel, follow_links=True)
            info = spot.stat
            if info is None:
                raise FileNotFoundError
            if stat.S_ISDIR(info.st_mode):
                raise ArgumentsRejected(f"{shown} is a folder; edit changes files")
            if not stat.S_ISREG(info.st_mode):
                raise ArgumentsRejected(f"{shown} is not a regular file")
            data = spot.folder.read(spot.name)
    except FileNotFoundError:
        raise ArgumentsRejected(
            f"{shown}: no such file; to create a file use the write tool"
        ) from None
    except IsADirectoryError:
        raise ArgumentsRejected(f"{shown} is a folder; edit changes files") from None
    except EscapesRoot as error:
        raise PathOutsideWorkspace(f"{shown}: {error}") from error
    except OSError as error:
        raise ArgumentsRejected(f"{shown}: cannot read: {error.strerror or error}") from error
    if b"\x00" in data:
        raise ArgumentsRejected(f"{shown} is a binary file; edit changes text files")
    return data, stat.S_IMODE(info.st_mode)


def _occurrences(text: str, old: str) -> list[int]:
    """Start offsets of the non-overlapping occurrences (as ``str.replace`` sees them)."""
    starts: list[int] = []
    at = text.find(old)
    while at >= 0:
        starts.append(at)
        at = text.find(old, at + len(old))
    return starts


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _not_found(text: str, old: str, shown: str) -> str:
    message = f"old_string was not found in {shown}"
    words = ascii_punctuation(old).split()
    if words:
        # Whitespace runs may differ (or be missing) between the words.
        pattern = r"\s*".join(re.escape(word) for word in words)
        match = re.search(pattern, ascii_punctuation(text))
        if match is not None:
            # Quote whole lines, so the indentation to copy is visible.
            line_start = text.rfind("\n", 0, match.start()) + 1
            line_end = text.find("\n", match.end())
            found = text[line_start : line_end if line_end >= 0 else len(text)]
            quoted = "\n".join(f"    {line}" for line in found.split("\n")[:_SHOWN_LINES])
            return (
                f"{message} exactly, but text that differs only in whitespace or punctuation "
                f"is at line {_line_of(text, match.start())}:\n{quoted}\n"
                "Copy it exactly (indentation, spaces, quotes) into old_string."
            )
    return f"{message}; read the file again and copy the text exactly"
