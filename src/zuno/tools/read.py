"""The ``read`` tool: a text file with line numbers, an image, or a folder's entries.

Reading is streamed. A file is opened in binary and read line by line, and the
read stops once the requested lines (or the output limits) are reached, so the
start of a gigabyte file costs about as much as the start of a small one. A
large ``offset`` is reached by counting newlines in fixed-size chunks, never by
decoding what is skipped, and a line longer than :data:`MAX_LINE_CHARS` is
drained in chunks rather than held whole. Memory therefore stays bounded by the
output limits, whatever the file.

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

import difflib
import os
import stat
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import BinaryIO

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
from zuno.core.signatures import binary_signature
from zuno.durability.file_versions import remember_read
from zuno.policy.link_rules import link_refusal
from zuno.policy.permissions import rule_matches
from zuno.workspace.real_paths import proc_refusal, relative_subject, special_file_kind

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "MAX_LINE_CHARS",
    "ReadArgs",
    "ReadTool",
]

DEFAULT_LIMIT = 2000
"""Lines (or folder entries) shown when ``limit`` is not given."""
MAX_LIMIT = 10000
"""The largest ``limit`` a call may ask for."""
MAX_LINE_CHARS = 2000
"""Characters kept of one line; the rest is replaced by a marker."""

_SNIFF_BYTES = 8192
# Bytes read to find an image's size when the image itself is not sent: a JPEG's
# frame header may follow up to 64 KiB of metadata per segment.
_IMAGE_HEADER_BYTES = 256 * 1024
_CHUNK = 1 << 20
# A line is read through at most this many bytes before it counts as long:
# MAX_LINE_CHARS characters of UTF-8 never take more than four bytes each.
_LINE_BYTES = MAX_LINE_CHARS * 4
# Counting the lines after the shown ones is cheap up to this size; beyond it
# the total is reported as unknown rather than paid for.
_COUNT_REST_BYTES = 32 << 20
_MAX_DIR_ENTRIES = 100_000
_SUGGESTIONS = 5
_WALK_MAX_DIRS = 2000
_WALK_MAX_ENTRIES = 50_000
_WALK_SKIP = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        "target",
        "dist",
        "build",
    }
)
_CONTINUATION = bytes(range(0x80, 0xC0))

# UTF-16 text is refused too (read shows UTF-8 and its relatives); its BOM says so.
_UTF16_BOMS: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xfe", "UTF-16 text (little-endian)"),
    (b"\xfe\xff", "UTF-16 text (big-endian)"),
)


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


@dataclass(slots=True)
class _Page:
    """What one read produced, before it is rendered."""

    lines: list[str] = field(default_factory=lambda: [])
    first: int = 1
    more: bool = False
    total: int | None = None
    notes: list[str] = field(default_factory=lambda: [])
    unit: str = "Lines"


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
    shown = _display(path, ctx.workspace)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise NotFound(_not_found_message(path, shown, ctx.workspace)) from None
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
            page = _read_file(opened, shown, st.st_size, offset, limit, ctx)
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {_reason(exc)}") from None
    finally:
        os.close(fd)
    if page.first > 1 and not page.lines:
        raise ToolError(_past_end_message(shown, offset, page))
    text = _render(page, ctx)
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


# --- files -------------------------------------------------------------------


def _read_file(
    path: Path, shown: str, size: int, offset: int, limit: int, ctx: ToolContext
) -> _Page:
    with open(path, "rb") as f:
        head = f.read(_SNIFF_BYTES)
        kind = _binary_kind(head)
        if kind is not None:
            raise ToolError(
                f"{shown} looks like a binary file ({kind}, {format_size(size)}); read shows "
                "text only. Inspect it with the shell tool instead (for example `file` or "
                "`xxd | head`)."
            )
        f.seek(0)
        page = _Page(first=offset)
        skipped = _skip_lines(f, offset - 1)
        if skipped < offset - 1:
            page.total = skipped + _partial_line(f)
            return page
        # Never read more lines than the output could carry anyway.
        wanted = min(limit, max(1, ctx.limits.max_lines))
        budget = ctx.limits.max_bytes
        used = 0
        cut_lines = 0
        endings = {"crlf": 0, "lf": 0, "cr": 0}
        while len(page.lines) < wanted and used <= budget:
            line = _next_line(f)
            if line is None:
                break
            text, cut, ending, lone_crs = line
            if ending:
                endings[ending] += 1
            endings["cr"] += lone_crs
            if cut:
                cut_lines += 1
            page.lines.append(text)
            used += len(text.encode("utf-8", "replace")) + 8
        rest = f.read(1)
        page.more = rest != b""
        if not page.more:
            page.total = offset - 1 + len(page.lines)
        elif size - f.tell() <= _COUNT_REST_BYTES:
            page.total = offset - 1 + len(page.lines) + _count_lines(rest, f)
        if cut_lines:
            page.notes.append(f"{cut_lines} long line(s) cut at {MAX_LINE_CHARS} characters.")
        note = _endings_note(endings)
        if note:
            page.notes.append(note)
        return page


def _endings_note(endings: dict[str, int]) -> str | None:
    """What the lines shown end with, when it is not plain LF (None then)."""
    crlf, lf, cr = endings["crlf"], endings["lf"], endings["cr"]
    if not crlf and not cr:
        return None
    if crlf and not lf and not cr:
        return "The file has CRLF line endings; shown without the CR."
    kinds = [f"{n} {name}" for n, name in ((crlf, "CRLF"), (lf, "LF"), (cr, "lone CR")) if n]
    shown = ", ".join(kinds)
    note = f"The file mixes line endings ({shown} in the lines shown); shown without the CR."
    if cr:
        note += (
            " A lone CR is a line break (apply_patch matches it as one): the text after it "
            "is shown unnumbered, under the line it breaks."
        )
    return note


def _binary_kind(head: bytes) -> str | None:
    for bom, kind in _UTF16_BOMS:
        if head.startswith(bom):
            return kind
    return binary_signature(head)


def _skip_lines(f: BinaryIO, count: int) -> int:
    """Move ``f`` past ``count`` newlines by counting in chunks; return how many it found."""
    found = 0
    while found < count:
        start = f.tell()
        chunk = f.read(_CHUNK)
        if not chunk:
            break
        n = chunk.count(b"\n")
        if found + n < count:
            found += n
            continue
        pos = -1
        for _ in range(count - found):
            pos = chunk.find(b"\n", pos + 1)
        f.seek(start + pos + 1)
        return count
    return found


def _partial_line(f: BinaryIO) -> int:
    """1 when the file ends in a line without a newline (``f`` is at its end)."""
    end = f.seek(0, os.SEEK_END)
    if end == 0:
        return 0
    f.seek(end - 1)
    return 0 if f.read(1) == b"\n" else 1


def _count_lines(first: bytes, f: BinaryIO) -> int:
    """Lines in ``first`` plus what remains of ``f``, counted chunk by chunk."""
    newlines = first.count(b"\n")
    last = first
    while chunk := f.read(_CHUNK):
        newlines += chunk.count(b"\n")
        last = chunk
    return newlines + (0 if last.endswith(b"\n") else 1)


def _next_line(f: BinaryIO) -> tuple[str, bool, str, int] | None:
    """The next line as shown: its text, whether it was cut, how it ended (``crlf``,
    ``lf``, or "" at the end of the file) and how many lone CRs break it.

    A lone CR is shown as a line break (``\n`` in the text)."""
    raw = f.readline(_LINE_BYTES)
    if not raw:
        return None
    extra = 0
    complete = raw.endswith(b"\n")
    if not complete and len(raw) >= _LINE_BYTES:
        # A long line: count the characters of the rest without keeping it.
        # Large reads and a seek back beat readline here, which would walk the
        # rest of the line through the small read buffer.
        while chunk := f.read(_CHUNK):
            newline = chunk.find(b"\n")
            if newline >= 0:
                extra += _char_count(chunk[:newline].removesuffix(b"\r"))
                f.seek(newline + 1 - len(chunk), os.SEEK_CUR)
                break
            extra += _char_count(chunk)
    ending = ("crlf" if raw.endswith(b"\r\n") else "lf") if complete else ""
    body = raw.rstrip(b"\n")
    if complete:
        body = body.removesuffix(b"\r")
    lone_crs = body.count(b"\r")
    # NUL is replaced as well: it is unprintable, and text stores refuse it.
    text = body.decode("utf-8", "replace").replace("\x00", "\ufffd").replace("\r", "\n")
    cut = max(0, len(text) - MAX_LINE_CHARS) + extra
    if cut:
        text = f"{text[:MAX_LINE_CHARS]} [... line cut: {cut} more characters]"
    return text, cut > 0, ending, lone_crs


def _char_count(data: bytes) -> int:
    """UTF-8 characters in ``data``: the bytes left once continuation bytes are deleted."""
    if data.isascii():  # the common case, and much cheaper than the deletion
        return len(data)
    return len(data.translate(None, _CONTINUATION))


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
) -> _Page:
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
    page = _Page(first=offset, unit="Entries")
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


# --- rendering -----------------------------------------------------------------


def _render(page: _Page, ctx: ToolContext) -> str:
    """Numbered lines plus at most one footer line, fitted to the output limits."""
    numbered = page.unit == "Lines"
    width = len(str(page.first + max(0, len(page.lines) - 1)))
    # A lone CR broke a line: the rest is shown under it, unnumbered.
    under = "\n" + " " * width + "\t"
    rendered = [
        f"{page.first + i:>{width}}\t{line.replace(chr(10), under)}" if numbered else line
        for i, line in enumerate(page.lines)
    ]
    sizes = [len(r.encode("utf-8", "replace")) + 1 for r in rendered]
    used = sum(sizes)
    while True:
        footer = _footer(page)
        lines_needed = len(rendered) + (1 if footer else 0)
        bytes_needed = used + len(footer.encode("utf-8"))
        fits = lines_needed <= ctx.limits.max_lines and bytes_needed <= ctx.limits.max_bytes
        if fits or len(rendered) <= 1:
            break
        # Drop whole lines from the end, so the next offset stays exact.
        rendered.pop()
        page.lines.pop()
        used -= sizes.pop()
        page.more = True
    body = "\n".join(rendered)
    return f"{body}\n{footer}" if footer else body


def _footer(page: _Page) -> str:
    parts: list[str] = []
    if page.more:
        last = page.first + len(page.lines) - 1
        of = f" of {page.total}" if page.total is not None else ""
        remain = f"{page.total - last} more" if page.total is not None else "More"
        parts.append(
            f"{page.unit} {page.first}-{last}{of} shown. {remain} remain: "
            f"call read again with offset={last + 1}."
        )
    parts.extend(page.notes)
    return f"[{' '.join(parts)}]" if parts else ""


def _past_end_message(shown: str, offset: int, page: _Page) -> str:
    unit = page.unit.lower()
    total = page.total
    if total is None:
        return f"offset {offset} is past the end of {shown}"
    if total == 0:
        return f"{shown} has no {unit}; offset {offset} is past its end"
    return (
        f"offset {offset} is past the end of {shown}, which has {total} {unit}; "
        f"use an offset from 1 to {total}"
    )


# --- missing paths ---------------------------------------------------------------


def _not_found_message(path: Path, shown: str, workspace: Path) -> str:
    matches = _close_matches(path, workspace)
    if not matches:
        return f"{shown} does not exist. Check the path, or search with glob."
    listed = ", ".join(_display(m, workspace) for m in matches)
    return f"{shown} does not exist. Did you mean: {listed}?"


def _close_matches(path: Path, workspace: Path) -> list[Path]:
    """Near names in the closest existing folder, then same-named files in the workspace."""
    found: list[Path] = []
    # Walk up to the deepest folder that exists; the part just below it is the
    # first wrong name, whichever component of the path it is.
    existing, missing = path.parent, path.name
    while not existing.is_dir() and existing != existing.parent:
        existing, missing = existing.parent, existing.name
    try:
        with os.scandir(existing) as entries:
            names = [e.name for _, e in zip(range(10_000), entries, strict=False)]
    except OSError:
        names = []
    for name in difflib.get_close_matches(missing, names, n=_SUGGESTIONS, cutoff=0.6):
        found.append(existing / name)
    for match in _walk_for(path.name, workspace):
        if match not in found:
            found.append(match)
        if len(found) >= _SUGGESTIONS * 2:
            break
    return found


def _walk_for(basename: str, root: Path) -> list[Path]:
    """Files named ``basename`` (any case) under ``root``, breadth first and bounded."""
    wanted = basename.lower()
    hits: list[Path] = []
    queue: deque[Path] = deque([root])
    dirs_seen = 0
    entries_seen = 0
    while queue and dirs_seen < _WALK_MAX_DIRS and entries_seen < _WALK_MAX_ENTRIES:
        folder = queue.popleft()
        dirs_seen += 1
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    entries_seen += 1
                    if entry.name.lower() == wanted:
                        hits.append(Path(entry.path))
                        if len(hits) >= _SUGGESTIONS:
                            return hits
                    # Symlinked folders are not followed: they can loop.
                    if entry.name not in _WALK_SKIP and entry.is_dir(follow_symlinks=False):
                        queue.append(Path(entry.path))
        except OSError:
            continue
    return hits


# --- small helpers -----------------------------------------------------------------


def _display(path: Path, workspace: Path) -> str:
    """A path as the model should see it: relative inside the workspace."""
    try:
        rel = path.relative_to(workspace)
    except ValueError:
        return str(path)
    return rel.as_posix() if rel.parts else "."


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
