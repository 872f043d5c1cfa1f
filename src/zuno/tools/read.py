"""The ``read`` tool: a text file with line numbers, an image, or a folder's entries.

Reading is streamed (:mod:`zuno.tools.read_lines`): the start of a gigabyte
file costs about as much as the start of a small one, and memory stays bounded
by the output limits, whatever the file. What was read is one page
(:mod:`zuno.tools.read_page`); a missing path is answered with close matches
(:mod:`zuno.tools.read_missing`).

A PNG, JPEG, GIF or WebP file (known by its first bytes, not its name) is
answered with a line naming its format, pixel size and byte size, and the image
itself rides with the result (see :mod:`zuno.contract.images`): its bytes are saved as
an artifact of the call and the provider sends them as image content, or says
plainly that the model cannot see images. An image over
``tool_output.image_max_bytes``, with a side over :data:`~zuno.contract.images.MAX_SIDE`
pixels is only described; one whose header cannot be read is refused as binary.

Read is a plain inspection (ReadOnly / Safe / ParallelSafe). It may open any
path, including absolute ones outside the workspace and the runtime's artifact
files; ``permission.rules`` on ``path`` are what narrow that, matched on where
the path really leads (see :mod:`zuno.workspace.real_paths`), and in strict mode a path
outside the workspace, the artifacts and ``permission.read_roots`` is asked
about first. Processes' secrets under ``/proc`` are never read. The file is
read through the descriptor that was checked, so a symlink swapped in after the
pre-flight cannot redirect it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from fnmatch import fnmatchcase
from pathlib import Path

import anyio.to_thread
from pydantic import Field

from zuno.contract.images import (
    MAX_SIDE,
    ImageAttachment,
    image_format,
    image_max_bytes,
    image_refusal,
    image_size,
)
from zuno.contract.output import bound_text, format_size
from zuno.contract.tool import NotFound, Tool, ToolArgs, ToolContext, ToolError, ToolResult
from zuno.core.declarations import INSPECTION
from zuno.durability.file_versions import remember_read
from zuno.policy.link_rules import link_refusal
from zuno.policy.permissions import rule_matches
from zuno.tools.read_lines import MAX_LINE_CHARS, read_text_page
from zuno.tools.read_missing import not_found_message
from zuno.tools.read_page import Page, past_end_message, render_page, shown_path
from zuno.workspace.real_paths import proc_refusal, relative_subject, special_file_kind

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "ReadArgs",
    "ReadTool",
]

DEFAULT_LIMIT = 2000
"""Lines (or folder entries) shown when ``limit`` is not given."""
MAX_LIMIT = 10000
"""The largest ``limit`` a call may ask for."""

# Bytes read to find an image's size when the image itself is not sent: a JPEG's
# frame header may follow up to 64 KiB of metadata per segment.
_IMAGE_HEADER_BYTES = 256 * 1024
_MAX_DIR_ENTRIES = 100_000


class ReadArgs(ToolArgs):
    """Arguments of ``read``."""

    path: str = Field(
        min_length=1,
        description=(
            "File or folder to read. Relative paths start at the workspace; absolute "
            "paths may point anywhere, including saved tool outputs."
        ),
    )
    offset: int | None = Field(
        default=None,
        ge=1,
        description="1-based line (or folder entry) to start from. Default 1.",
    )
    limit: int | None = Field(
        default=None,
        ge=1,
        le=MAX_LIMIT,
        description=f"Most lines (or entries) to show, 1..{MAX_LIMIT}. Default {DEFAULT_LIMIT}.",
    )


class ReadTool(Tool[ReadArgs]):
    """Read a text file with line numbers, or list a folder."""

    name = "read"
    description = (
        "Read a text file, shown as numbered lines ('<number><TAB><line>'), or list a "
        f"folder's entries (folders end in '/'). Shows up to {DEFAULT_LIMIT} lines by "
        f"default (limit 1..{MAX_LIMIT}); use offset to continue where the output says. "
        f"Lines longer than {MAX_LINE_CHARS} characters are cut with a marker. Output is "
        "also capped by the tool output byte limit. PNG, JPEG, GIF and WebP files (known "
        "by content, not name) are returned as an image with its pixel size (described in "
        "words to models without image input); images over tool_output.image_max_bytes "
        f"(default 3.75 MiB) or with a side over {MAX_SIDE} pixels are only described. "
        "Other binary files are refused; invalid "
        "UTF-8 is replaced. Works on workspace files, saved tool outputs and absolute "
        "paths elsewhere (in strict mode, paths outside the workspace need approval unless "
        "permission.read_roots lists them), unless permission rules deny the path. A "
        "missing path is answered with close matches."
    )
    args_model = ReadArgs
    declaration = INSPECTION
    rule_argument = "path"
    rule_match = "path"

    async def run(self, args: ReadArgs, ctx: ToolContext) -> ToolResult:
        """Read the file or folder named by ``args.path``."""
        # The read is blocking file I/O; a thread keeps the event loop free, and
        # abandoning it on cancel is harmless because it changes nothing.
        return await anyio.to_thread.run_sync(_read, args, ctx, abandon_on_cancel=True)


def _read(args: ReadArgs, ctx: ToolContext) -> ToolResult:
    path = _resolve(args.path, ctx)
    shown = shown_path(path, ctx.workspace)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise NotFound(not_found_message(path, shown, ctx.workspace)) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise ToolError(f"cannot read {shown}: {_reason(exc)}") from None
    offset = args.offset or 1
    limit = args.limit or DEFAULT_LIMIT
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        # Refused before opening: opening a device can itself do something.
        raise ToolError(
            f"cannot read {shown}: it is a {special_file_kind(st.st_mode)}, "
            "not a regular file or folder"
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {_reason(exc)}") from None
    try:
        # Everything below reads what was opened, through its descriptor: a
        # symlink swapped in after the pre-flight checked the path changes nothing.
        opened = _checked(fd, st, shown, ctx)
        if stat.S_ISDIR(st.st_mode):
            page = _list_folder(opened, offset, limit, _hidden_entries(opened, ctx))
            kind = "directory"
            if not page.lines and page.total == 0:
                return _empty(f"{shown} is an empty folder.", path, kind)
        else:
            kind = "file"
            remember_read(ctx, fd)  # the whole file's hash, whatever page is shown
            if st.st_size == 0 and _is_really_empty(opened):
                return _empty(f"{shown} is empty (0 bytes).", path, kind)
            image = _read_image(opened, path, shown, st.st_size, ctx)
            if image is not None:
                return image
            page = read_text_page(opened, shown, st.st_size, offset, limit, ctx)
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {_reason(exc)}") from None
    finally:
        os.close(fd)
    if page.first > 1 and not page.lines:
        raise ToolError(past_end_message(shown, offset, page))
    text = render_page(page, ctx)
    return ToolResult(
        output=bound_text(text, ctx.limits).text,
        data={
            "path": str(path),
            "kind": kind,
            "lines_shown": len(page.lines),
            "total_lines": page.total,
            "next_offset": page.first + len(page.lines) if page.more else None,
        },
    )


def _checked(fd: int, before: os.stat_result, shown: str, ctx: ToolContext) -> Path:
    """The opened file as a path of its descriptor, once it is known to be the one checked.

    The pre-flight matched the rules on where the path led then; a process
    swapping a symlink since could make the open reach a denied file or a
    process's secrets. The descriptor's real path is checked again here.
    """
    now = os.fstat(fd)
    if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
        raise ToolError(f"cannot read {shown}: it changed while being opened; try again")
    opened = f"/proc/self/fd/{fd}"
    try:
        real = os.readlink(opened)
    except OSError:
        return Path(opened)
    refusal = proc_refusal(real)
    if refusal is None and _denied(real, ctx):
        refusal = "a permission rule denies reading it"
    if refusal is not None:
        raise ToolError(f"cannot read {shown}: it leads to {real}, and {refusal}")
    linked = _link_refusal(now, ctx)
    if linked is not None:
        raise ToolError(f"cannot read {shown}: {linked}; ask the user to look at it")
    return Path(opened)


def _link_refusal(st: os.stat_result, ctx: ToolContext) -> str | None:
    """Why a file with several names (hard links) is not read under the deny rules."""
    permissions = ctx.permissions
    if permissions is None:
        return None
    patterns = [
        rule.pattern
        for rule in permissions.rules
        if rule.action == "deny" and fnmatchcase("read", rule.tool)
    ]
    return link_refusal(st, patterns, os.path.realpath(ctx.workspace))


def _denied(real: str, ctx: ToolContext) -> bool:
    permissions = ctx.permissions
    if permissions is None:
        return False
    subject = relative_subject(real, os.path.realpath(ctx.workspace))
    return any(
        rule.action == "deny" and rule_matches(rule, "read", subject, "path")
        for rule in permissions.rules
    )


def _resolve(raw: str, ctx: ToolContext) -> Path:
    try:
        return ctx.resolve(raw)
    except (ValueError, RuntimeError) as exc:  # "~user" that does not exist, and the like
        raise ToolError(f"cannot use path {raw!r}: {exc}") from None


def _empty(message: str, path: Path, kind: str) -> ToolResult:
    return ToolResult(
        output=message,
        data={
            "path": str(path),
            "kind": kind,
            "lines_shown": 0,
            "total_lines": 0,
            "next_offset": None,
        },
    )


def _is_really_empty(path: Path) -> bool:
    # Files under /proc report size 0 and still have content.
    with open(path, "rb") as f:
        return f.read(1) == b""


# --- images ------------------------------------------------------------------


def _read_image(
    opened: Path, path: Path, shown: str, size: int, ctx: ToolContext
) -> ToolResult | None:
    """The result for an image file, or None when the file is not one."""
    with open(opened, "rb") as f:
        fmt = image_format(f.read(16))
        if fmt is None:
            return None
        f.seek(0)
        cap = image_max_bytes(ctx.config)
        # One read serves both needs: the whole image when it may be sent,
        # enough for its header when it may not.
        data = f.read(max(cap, _IMAGE_HEADER_BYTES) + 1)
    dims = image_size(data, fmt)
    if dims is None:
        # A signature without a readable header: not an image a model could be
        # sent, so it is refused like any other binary file.
        return None
    total = max(size, len(data))
    facts = f"{shown}: {fmt.name} image, {dims[0]}x{dims[1]} pixels, {format_size(total)}"
    refusal = image_refusal(dims, total, cap)
    image_data: dict[str, object] = {
        "path": str(path),
        "kind": "image",
        "media_type": fmt.media_type,
        "width": dims[0],
        "height": dims[1],
        "bytes": total,
        "image_sent": refusal is None,
        "lines_shown": 0,
        "total_lines": None,
        "next_offset": None,
    }
    if refusal is not None:
        return ToolResult(output=f"{facts}; not sent: {refusal}.", data=image_data)
    saved = ctx.artifacts.write_bytes(ctx.session_id, ctx.call_id, "image", data, fmt.extension)
    attachment = ImageAttachment(
        path=str(saved),
        media_type=fmt.media_type,
        width=dims[0],
        height=dims[1],
        size=len(data),
        source=shown,
    )
    return ToolResult(output=f"{facts}.", data=image_data, artifact=saved, images=(attachment,))


# --- folders -----------------------------------------------------------------


def _hidden_entries(opened: Path, ctx: ToolContext) -> Callable[[str], bool] | None:
    """Which entries of the opened folder a deny rule keeps from ``read`` (never listed)."""
    permissions = ctx.permissions
    if permissions is None or not any(r.action == "deny" for r in permissions.rules):
        return None
    try:
        folder = os.readlink(opened).rstrip("/")
    except OSError:
        return None
    return lambda name: _denied(f"{folder}/{name}", ctx)


def _list_folder(
    path: Path, offset: int, limit: int, hidden: Callable[[str], bool] | None = None
) -> Page:
    names: list[str] = []
    capped = False
    with os.scandir(path) as entries:
        for entry in entries:
            if len(names) >= _MAX_DIR_ENTRIES:
                capped = True
                break
            if hidden is not None and hidden(entry.name):
                continue
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            names.append(_clean_name(entry.name) + ("/" if is_dir else ""))
    names.sort()
    page = Page(first=offset, unit="Entries")
    page.lines = names[offset - 1 : offset - 1 + limit]
    page.more = offset - 1 + len(page.lines) < len(names) or capped
    page.total = None if capped else len(names)
    if capped:
        page.notes.append(
            f"The folder has more than {_MAX_DIR_ENTRIES} entries; only the first "
            f"{_MAX_DIR_ENTRIES} found were sorted and listed. Use glob to narrow it."
        )
    return page


def _clean_name(name: str) -> str:
    # Undecodable bytes come back from the OS as lone surrogates; make them
    # visible replacement characters, and keep one entry on one line.
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return text.replace("\n", "\\n").replace("\r", "\\r")


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
