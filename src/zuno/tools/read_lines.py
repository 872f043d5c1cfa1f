"""A text file read as a page of lines, streamed so that memory stays bounded.

The file is opened in binary and read line by line, and the read stops once
the requested lines (or the output limits) are reached. A large ``offset`` is
reached by counting newlines in fixed-size chunks, never by decoding what is
skipped, and a line longer than :data:`MAX_LINE_CHARS` is drained in chunks
rather than held whole. Binary files (by their first bytes, UTF-16 included)
are refused; line endings other than LF are named in a note.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from zuno.contract.output import format_size
from zuno.contract.tool import ToolContext, ToolError
from zuno.core.signatures import binary_signature
from zuno.tools.read_page import Page

__all__ = ["MAX_LINE_CHARS", "read_text_page"]

MAX_LINE_CHARS = 2000
"""Characters kept of one line; the rest is replaced by a marker."""

_SNIFF_BYTES = 8192
_CHUNK = 1 << 20
# A line is read through at most this many bytes before it counts as long:
# MAX_LINE_CHARS characters of UTF-8 never take more than four bytes each.
_LINE_BYTES = MAX_LINE_CHARS * 4
# Counting the lines after the shown ones is cheap up to this size; beyond it
# the total is reported as unknown rather than paid for.
_COUNT_REST_BYTES = 32 << 20
_CONTINUATION = bytes(range(0x80, 0xC0))

# UTF-16 text is refused too (read shows UTF-8 and its relatives); its BOM says so.
_UTF16_BOMS: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xfe", "UTF-16 text (little-endian)"),
    (b"\xfe\xff", "UTF-16 text (big-endian)"),
)


def read_text_page(
    path: Path, shown: str, size: int, offset: int, limit: int, ctx: ToolContext
) -> Page:
    """Up to ``limit`` lines of the text file at ``path``, from line ``offset`` (1-based).

    Raises:
        ToolError: The file looks binary (``shown`` names it in the message).
    """
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
        page = Page(first=offset)
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
