"""The ``write`` tool: create a file, or intentionally replace one whole.

A write is atomic: the new content goes to a temporary file in the target's own
folder (same file system, so the rename cannot degrade into a copy), is flushed
to disk, takes the old file's permission bits and owner, and then replaces the
target by a rename in that folder. A reader therefore sees the old file or the
new one, never half of either. The target must lie beneath the workspace (or a
folder of ``sandbox.writable_roots``), and every step opens it relative to that
root without following a symlink out of it (see :mod:`zuno.workspace.beneath`), so a
process that swaps a folder for a symlink mid-write cannot redirect it. A link
that stays inside is written through, so the link itself survives. In
``read-only`` sandbox mode the tool refuses to run.

An existing file is replaced only when this session has seen its current
content (read it, or wrote it last): see :mod:`zuno.durability.file_versions`. A new file
may always be created.

Write keeps the strict default declaration (SideEffecting / Never / Exclusive).
"""

from __future__ import annotations

import difflib
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import anyio.to_thread
from pydantic import Field

from zuno.contract.output import format_size
from zuno.contract.tool import (
    PathOutsideWorkspace,
    Tool,
    ToolArgs,
    ToolContext,
    ToolError,
    ToolResult,
)
from zuno.dispatch.landing import LandingGuard, landing_guard
from zuno.durability.file_versions import WriteClaim, claim_writes
from zuno.workspace.beneath import Beneath, Confined, EscapesRoot

__all__ = ["WriteArgs", "WriteTool"]

# The approval preview diffs the old content only up to this size; beyond it a
# diff is neither cheap to compute nor readable in a prompt.
_PREVIEW_MAX_OLD_BYTES = 256 * 1024
_PREVIEW_MAX_LINES = 60
_PREVIEW_MAX_CHARS = 4000


class WriteArgs(ToolArgs):
    """Arguments of ``write``."""

    path: str = Field(
        min_length=1,
        description=(
            "File to create or replace, inside the workspace or a configured writable "
            "root (relative paths start in the workspace). Missing parent folders are created."
        ),
    )
    content: str = Field(
        description="The complete new content of the file, written as UTF-8 exactly as given.",
    )


@dataclass(frozen=True, slots=True)
class _Written:
    path: Path
    created: bool
    size: int
    lines: int
    old_size: int | None


class WriteTool(Tool[WriteArgs]):
    """Create a file, or replace one whole, atomically and inside the workspace."""

    name = "write"
    description = (
        "Create a file, or replace an existing file's whole content. An existing file must "
        "have been read in this session first, and is refused if it changed since this "
        "session last read or wrote it (read it again). The path must be "
        "inside the workspace or a configured writable root (symlinks leading out are "
        "refused); missing parent folders are created. The write is atomic and keeps an "
        "existing file's permissions. Refused in read-only mode. For localized edits of an "
        "existing file use apply_patch instead."
    )
    writes_files = True
    args_model = WriteArgs
    rule_argument = "path"
    rule_match = "path"

    def preview(self, args: WriteArgs, workspace: Path | None = None) -> str:
        """The path and a short diff against the current content, or the new file's size.

        Args:
            args: The validated arguments.
            workspace: Where relative paths start; the process's folder when not given.
        """
        base = workspace if workspace is not None else Path.cwd()
        raw = Path(os.path.expanduser(args.path))
        target = Path(os.path.normpath(raw if raw.is_absolute() else base / raw))
        lines = _line_count(args.content)
        size = len(args.content.encode("utf-8", "replace"))
        header = f"write {args.path}"
        new = f"{lines} lines ({format_size(size)})"
        try:
            rel = PurePosixPath(target.relative_to(base).as_posix())
        except ValueError:
            # A prompt never shows a file outside the workspace: the call may not reach it.
            return f"{header}: a path outside the workspace, {new}; its content is not shown"
        try:
            with Beneath(base) as root:
                spot = root.locate(rel, follow_links=True)
                st = spot.stat
                if st is None:
                    return f"{header}: new file, {new}"
                if not stat.S_ISREG(st.st_mode):
                    raise IsADirectoryError
                if st.st_size > _PREVIEW_MAX_OLD_BYTES:
                    return (
                        f"{header}: replaces {format_size(st.st_size)} with {new}; "
                        "too large to diff"
                    )
                old = spot.folder.read(spot.name).decode("utf-8", "replace")
        except EscapesRoot:
            return f"{header}: leads through a symlink out of the workspace (it will be refused)"
        except (FileNotFoundError, NotADirectoryError, ValueError):
            return f"{header}: new file, {new}"
        except IsADirectoryError:
            return f"{header}: the path exists and is not a regular file (the write will fail)"
        except OSError as exc:
            return f"{header}: replaces an existing file that could not be read ({exc.strerror})"
        if old == args.content:
            return f"{header}: replaces the file with identical content (no change)"
        diff = list(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                args.content.splitlines(keepends=True),
                fromfile=f"a/{args.path}",
                tofile=f"b/{args.path}",
                n=2,
            )
        )
        return f"{header}: replaces the file ({lines} lines)\n{_bounded_diff(diff)}"

    async def run(self, args: WriteArgs, ctx: ToolContext) -> ToolResult:
        """Write ``args.content`` to ``args.path``."""
        if args.path.endswith(("/", os.sep)):
            raise ToolError(f"{args.path!r} names a folder; give the path of a file")
        try:
            target = ctx.resolve_writable(args.path)
            data = args.content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError(
                "content has characters that cannot be written as UTF-8 (unpaired "
                "surrogates); send valid Unicode text"
            ) from None
        except (ValueError, RuntimeError) as exc:  # a NUL in the path, "~nobody"
            raise ToolError(f"cannot use path {args.path!r}: {exc}") from None
        # Not cancellable: once started, the write and rename must finish together.
        guard = landing_guard(ctx, self.name)

        def tracked() -> _Written:
            with claim_writes(ctx, [target.path]) as claim:
                return _write(target, data, args.path, guard, claim)

        written = await anyio.to_thread.run_sync(tracked)
        shown = _display(target.path, ctx.workspace)
        through = ""
        if written.path != target.path:
            through = f" (through the symlink, to {_display(written.path, ctx.workspace)})"
        if written.created:
            verb = "Created"
        else:
            verb = "Replaced"
            through += f" (was {format_size(written.old_size or 0)})"
        noun = "line" if written.lines == 1 else "lines"
        return ToolResult(
            output=(
                f"{verb} {shown}{through}: wrote {written.lines} {noun}, "
                f"{format_size(written.size)}."
            ),
            data={
                "path": str(written.path),
                "created": written.created,
                "bytes": written.size,
                "lines": written.lines,
            },
        )


def _write(
    target: Confined, data: bytes, shown: str, guard: LandingGuard, claim: WriteClaim | None
) -> _Written:
    # Leaving the block by an exception removes the folders created for the file.
    with Beneath(target.root) as root:
        try:
            spot = root.locate(target.rel, follow_links=True, create_folders=True)
        except EscapesRoot:
            raise PathOutsideWorkspace(
                f"{shown} leads through a symlink out of {target.root}; write to a path inside it"
            ) from None
        except OSError as exc:
            raise ToolError(f"cannot write {shown}: {_reason(exc)}") from None
        st = spot.stat
        if st is not None and not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise ToolError(f"cannot write {shown}: it is {kind}")
        try:
            lands = root.real_path(spot)
            guard(target, lands)
        except EscapesRoot:
            raise PathOutsideWorkspace(
                f"{shown}: its folder was moved out of {target.root}; nothing was written"
            ) from None
        if claim is not None:
            try:
                claim.verify(lands, st, lambda: spot.folder.read(spot.name), shown)
            except OSError as exc:
                raise ToolError(f"cannot write {shown}: {_reason(exc)}") from None
        try:
            spot.folder.replace_file(spot.name, data, like=st)
        except OSError as exc:
            raise ToolError(f"cannot write {shown}: {_reason(exc)}") from None
        if claim is not None:
            claim.wrote(lands, data)
        try:
            written = root.real_path(spot) if spot.followed else target.path
        except EscapesRoot:  # the folder was moved away after the write: name it as asked
            written = target.path
    return _Written(
        path=written,
        created=st is None,
        size=len(data),
        lines=_line_count_bytes(data),
        old_size=None if st is None else st.st_size,
    )


def _line_count(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _line_count_bytes(data: bytes) -> int:
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def _bounded_diff(diff: list[str]) -> str:
    shown: list[str] = []
    chars = 0
    for line in diff[:_PREVIEW_MAX_LINES]:
        if chars + len(line) > _PREVIEW_MAX_CHARS:
            break
        shown.append(line if line.endswith("\n") else line + "\n")
        chars += len(line)
    rest = len(diff) - len(shown)
    if rest:
        shown.append(f"[... {rest} more diff lines]\n")
    return "".join(shown).rstrip("\n")


def _display(path: Path, workspace: Path) -> str:
    try:
        rel = path.relative_to(workspace)
    except ValueError:
        try:
            rel = path.relative_to(workspace.resolve())
        except ValueError:
            return str(path)
    return rel.as_posix()


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)
