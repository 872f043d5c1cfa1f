"""Bounded output: incremental decoding, head-and-tail truncation, artifacts.

A tool's output may be far larger than the model window (a command printing a
gigabyte). :class:`BoundedOutput` takes bytes as they arrive, writes every byte
to an artifact file and keeps in memory only what the model will see: the head
up to the configured limits and a rolling tail. When the output did not fit, the
model-visible text says how many lines and bytes were left out and where the
full output is kept, so the ``read`` tool can open it.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

__all__ = [
    "ArtifactStore",
    "BoundedOutput",
    "BoundedText",
    "CappedFile",
    "OutputLimits",
    "bound_text",
    "format_size",
]


@dataclass(frozen=True, slots=True)
class OutputLimits:
    """How much of one call's output the model may see."""

    max_bytes: int = 51200
    max_lines: int = 2000


@dataclass(frozen=True, slots=True)
class BoundedText:
    """What remains of an output after the limits were applied."""

    text: str
    truncated: bool
    total_bytes: int
    total_lines: int
    omitted_bytes: int = 0
    omitted_lines: int = 0
    artifact: Path | None = None


def format_size(n: int) -> str:
    """A byte count for people: ``512 B``, ``48.0 KiB``, ``1.0 GiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover - loop always returns


class ArtifactStore:
    """A folder of full outputs, one file per call and stream."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_for(self, session_id: str, call_id: str, name: str, suffix: str = ".txt") -> Path:
        """Where the artifact ``name`` of a call lives (nothing is created yet)."""
        folder = self.root / session_id
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        return folder / f"{call_id}-{safe}{suffix}"

    def write_text(self, session_id: str, call_id: str, name: str, text: str) -> Path:
        """Save a whole text as an artifact and return its path."""
        path = self.path_for(session_id, call_id, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    def write_bytes(
        self, session_id: str, call_id: str, name: str, data: bytes, suffix: str
    ) -> Path:
        """Save bytes (an image) as an artifact with their own extension; return its path."""
        path = self.path_for(session_id, call_id, name, suffix)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path


def _count_lines(data: bytes | str, ends_with_newline: bool) -> int:
    if not data:
        return 0
    n = data.count(b"\n") if isinstance(data, bytes) else data.count("\n")
    return n if ends_with_newline else n + 1


_SPARSE_NEWLINES = 32
_LONG_LINE = 40
"""Lines at least this long on average are counted by removing the newlines."""


def _count_newlines(data: bytes) -> int:
    """The number of newlines in data, fast whether lines are short or very long.

    ``bytes.count`` goes a byte at a time (about 1 s a GiB here) while
    ``bytes.find`` of one byte is memchr, some forty times faster: output with
    long lines (or none) is counted by finding each newline, and a chunk that
    turns out to hold many falls back to counting the rest. Where its first
    lines were 40 bytes or longer, the rest is counted by what removing the
    newlines takes away (``bytes.replace`` copies the runs between them with
    memchr and memcpy: 2x faster than ``count`` on 80-byte lines, 8x on
    1000-byte ones); shorter lines keep ``count``, which removing would slow.
    """
    found = 0
    pos = data.find(b"\n")
    while pos != -1:
        found += 1
        if found == _SPARSE_NEWLINES:
            if pos >= _LONG_LINE * _SPARSE_NEWLINES:
                return len(data) - len(data.replace(b"\n", b""))
            return found + data.count(b"\n", pos + 1)
        pos = data.find(b"\n", pos + 1)
    return found


class CappedFile:
    """A file that keeps at most ``cap`` bytes of a stream: its first and last parts.

    Until the stream passes the cap the file grows as usual. Past it, the last
    part is kept in a ring inside the file's second half, and :meth:`close` puts
    it back in order behind a marker saying how much of the middle was dropped,
    so a command printing without end cannot fill the disk. While the stream is
    past the cap, only the first :attr:`ordered_bytes` of the file read in order.
    """

    def __init__(
        self, path: Path, cap: int | None, *, append: bool = False, live: bool = False
    ) -> None:
        """Open path for a new stream (or after what it holds, with append).

        ``live`` flushes every write, for a file read while it is written.

        Raises:
            ValueError: cap is under 2.
        """
        if cap is not None and cap < 2:
            raise ValueError(f"the cap must be at least 2 bytes, got {cap}")
        self.path = path
        self.cap = cap
        path.parent.mkdir(parents=True, exist_ok=True)
        # Not O_APPEND even to append: Linux then ignores pwrite's offset, and the ring
        # past the cap is written with pwrite.
        flags = os.O_WRONLY | os.O_CREAT | (0 if append else os.O_TRUNC)
        self._file: IO[bytes] = os.fdopen(os.open(path, flags, 0o644), "wb")
        self._file.seek(0, os.SEEK_END)
        self._live = live
        self.total_bytes = self._file.tell()

    @property
    def ordered_bytes(self) -> int:
        """How much of the file is the stream's start, in order."""
        if self.cap is None or self.total_bytes <= self.cap:
            return self.total_bytes
        return self.cap - self.cap // 2

    def write(self, data: bytes) -> None:
        """Append the next chunk of the stream."""
        if self.cap is None or self.total_bytes + len(data) <= self.cap:
            self._file.write(data)
            if self._live:
                self._file.flush()
        else:
            self._write_capped(data, self.cap)
        self.total_bytes += len(data)

    def _write_capped(self, data: bytes, cap: int) -> None:
        """Write a chunk reaching past the cap: what fits goes on, the rest into the ring.

        Stream position p at or past ``head`` lives at file offset
        ``head + (p - head) % tail``, which for p below the cap is p itself.
        """
        head, tail = cap - cap // 2, cap // 2
        view = memoryview(data)
        fitting = max(0, cap - self.total_bytes)
        if fitting:
            self._file.write(view[:fitting])
        self._file.flush()
        if not tail:
            return
        # Only the last `tail` bytes of the chunk can survive in the ring.
        start = max(fitting, len(data) - tail)
        position = self.total_bytes + start
        fd = self._file.fileno()
        while start < len(data):
            slot = (position - head) % tail
            n = min(len(data) - start, tail - slot)
            os.pwrite(fd, view[start : start + n], head + slot)
            start += n
            position += n

    def close(self, label: str = "output") -> None:
        """Close the file; a capped one is rewritten as first part, marker, last part.

        The rewrite happens in place: the first part stays where it is, and of the
        ring's two pieces the smaller one is set aside while the larger one moves,
        so at most one and a half times the last part is copied (a new file would
        copy the whole cap).
        """
        self._file.close()
        cap = self.cap
        if cap is None or self.total_bytes <= cap:
            return
        head, tail = cap - cap // 2, cap // 2
        oldest = (self.total_bytes - head) % tail if tail else 0
        dropped = self.total_bytes - cap
        marker = (
            f"\n[... {format_size(dropped)} ({dropped} bytes) dropped from the middle of this "
            f"{label} by the artifact cap; the first {format_size(head)} and the last "
            f"{format_size(tail)} are kept ...]\n"
        ).encode()
        with open(self.path, "r+b") as file:
            _unroll_ring(file.fileno(), head, tail, oldest, marker, self.path.parent)


def _unroll_ring(fd: int, head: int, tail: int, oldest: int, marker: bytes, spare: Path) -> None:
    """Turn ``first part | ring`` into ``first part | marker | last part in order``.

    The ring at ``head`` holds the newest bytes first (``oldest`` of them, the
    stream's very end) and then the older ones (the rest of ``tail``). The piece
    set aside goes to a temporary file in ``spare`` (the same file system).
    """
    newer, older = oldest, tail - oldest
    after_marker = head + len(marker)
    with tempfile.TemporaryFile(dir=spare) as aside:
        if older <= newer:
            _copy(fd, head + newer, aside.fileno(), 0, older)
            _move(fd, head, after_marker + older, newer)
            os.pwrite(fd, marker, head)
            _copy(aside.fileno(), 0, fd, after_marker, older)
        else:
            _copy(fd, head, aside.fileno(), 0, newer)
            _move(fd, head + newer, after_marker, older)
            os.pwrite(fd, marker, head)
            _copy(aside.fileno(), 0, fd, after_marker + older, newer)


_COPY_CHUNK = 1 << 20


def _copy(src: int, src_at: int, dst: int, dst_at: int, count: int) -> None:
    """Copy count bytes between two files, in the kernel when it can."""
    while count > 0:
        try:
            n = os.copy_file_range(src, dst, count, src_at, dst_at)
        except OSError:  # another file system, or no copy_file_range: through memory
            n = os.pwrite(dst, os.pread(src, min(count, _COPY_CHUNK), src_at), dst_at)
        if n <= 0:
            return
        src_at, dst_at, count = src_at + n, dst_at + n, count - n


def _move(fd: int, src_at: int, dst_at: int, count: int) -> None:
    """Move count bytes within one file, the ranges possibly overlapping."""
    if count <= 0 or src_at == dst_at:
        return
    if dst_at < src_at:  # front to back: a write never reaches bytes not yet read
        done = 0
        while done < count:
            chunk = os.pread(fd, min(_COPY_CHUNK, count - done), src_at + done)
            if not chunk:
                return
            os.pwrite(fd, chunk, dst_at + done)
            done += len(chunk)
        return
    left = count  # back to front
    while left > 0:
        size = min(_COPY_CHUNK, left)
        left -= size
        os.pwrite(fd, os.pread(fd, size, src_at + left), dst_at + left)


class BoundedOutput:
    """Accumulates a byte stream within limits, spilling the whole to an artifact.

    Memory held is about twice ``max_bytes`` whatever the stream's size. Invalid
    UTF-8 is replaced, never fatal.

    With ``artifact_max_bytes``, the artifact keeps only the first and the last
    part of a longer stream (half the cap each), with a marker saying how much
    of the middle was dropped, so a command printing without end cannot fill
    the disk. Until the stream passes the cap the artifact grows as usual; past
    it, the last part is kept in a ring inside the file's second half and put
    back in order by :meth:`finish`.
    """

    def __init__(
        self,
        limits: OutputLimits,
        artifact_path: Path | None = None,
        artifact_max_bytes: int | None = None,
    ) -> None:
        """Start an empty stream.

        Args:
            limits: What the model may see.
            artifact_path: Where to save the stream; None keeps no artifact.
            artifact_max_bytes: The most the artifact may hold (at least 2);
                None for no cap.

        Raises:
            ValueError: artifact_max_bytes is under 2.
        """
        if artifact_max_bytes is not None and artifact_max_bytes < 2:
            raise ValueError(f"artifact_max_bytes must be at least 2, got {artifact_max_bytes}")
        self._limits = limits
        self._artifact_path = artifact_path
        self._artifact_max = artifact_max_bytes
        self._sink: CappedFile | None = None
        self._head = bytearray()
        self._head_full = False
        self._head_lines = 0
        self._tail = bytearray()
        self._total_bytes = 0
        self._newlines = 0
        self._last_byte_newline = True
        if artifact_path is not None:
            artifact_path.parent.mkdir(parents=True, exist_ok=True)
            # Flushed as it comes: the live view follows a running command's artifact.
            self._sink = CappedFile(artifact_path, artifact_max_bytes, live=True)

    @property
    def total_bytes(self) -> int:
        """Bytes fed so far."""
        return self._total_bytes

    def feed(self, data: bytes) -> None:
        """Take the next chunk of the stream."""
        if not data:
            return
        if self._sink is not None:
            self._sink.write(data)
        self._total_bytes += len(data)
        self._newlines += _count_newlines(data)
        self._last_byte_newline = data.endswith(b"\n")
        if not self._head_full:
            room = self._limits.max_bytes + 1 - len(self._head)
            piece = data[:room]
            lines_room = self._limits.max_lines + 1 - self._head_lines
            cut = _nth_newline(piece, lines_room)
            if cut is not None:
                piece = piece[: cut + 1]
            self._head += piece
            self._head_lines += piece.count(b"\n")
            if len(piece) == len(data) and cut is None:
                return
            self._head_full = True
            data = data[len(piece) :]
        keep = self._limits.max_bytes + 4
        if len(data) >= keep:
            # Only the end of a big chunk can ever be shown: copy just that.
            self._tail = bytearray(memoryview(data)[-keep:])
            return
        self._tail += data
        if len(self._tail) > 4 * keep:
            del self._tail[: len(self._tail) - keep]

    def finish(self, label: str = "output") -> BoundedText:
        """Close the artifact and return the model-visible text."""
        if self._sink is not None:
            self._sink.close(label)
            self._sink = None
        total_lines = self._newlines + (0 if self._last_byte_newline else 1)
        fits = self._total_bytes <= self._limits.max_bytes and total_lines <= self._limits.max_lines
        if fits:
            self._discard_artifact()
            text = _decode(bytes(self._head))
            return BoundedText(text, False, self._total_bytes, total_lines)
        return self._truncated(total_lines, label)

    def _truncated(self, total_lines: int, label: str) -> BoundedText:
        # Head, marker and tail together stay within the limits, so a bounded text
        # is never cut a second time by the dispatcher's last guard. The marker is
        # measured, not guessed: with a small budget a long reserve would leave the
        # output itself almost nothing.
        size = f"{format_size(self._total_bytes)}, {total_lines} lines"
        verbose = self._verbose_marker_fits(label, size, total_lines)
        # The longest the marker can be: the omitted counts are at most the totals
        # (a smaller size can print a few characters longer: "1023 B" vs "1.0 KiB").
        longest = self._marker(total_lines, self._total_bytes, label, size, verbose)
        reserve = len(longest.encode()) + 4
        content = max(self._limits.max_bytes - reserve, self._limits.max_bytes // 4, 2)
        head_bytes = max(1, content // 2)
        tail_bytes = max(1, content - head_bytes)
        half_lines = max(1, (self._limits.max_lines - 3) // 2)
        head = bytes(self._head[:head_bytes])
        cut = _nth_newline(head, half_lines)
        if cut is not None:
            head = head[: cut + 1]
        elif b"\n" in head and len(head) == head_bytes:
            head = head[: head.rindex(b"\n") + 1]
        # What follows the shown head, when nothing between was dropped, else the
        # rolling tail (which then holds more than the tail's share).
        tail_source = bytes(self._tail)
        if len(self._head) + len(self._tail) == self._total_bytes:
            tail_source = bytes(self._head[len(head) :]) + tail_source
        tail = _last_lines(_from_line_start(tail_source, tail_bytes), half_lines)
        omitted_bytes = max(0, self._total_bytes - len(head) - len(tail))
        shown_lines = head.count(b"\n") + _count_lines(tail, tail.endswith(b"\n"))
        omitted_lines = max(0, total_lines - shown_lines)
        marker = self._marker(omitted_lines, omitted_bytes, label, size, verbose)
        text = _decode(head) + marker + _decode(tail, strip_partial=True)
        return BoundedText(
            text,
            True,
            self._total_bytes,
            total_lines,
            omitted_bytes,
            omitted_lines,
            self._artifact_path,
        )

    def _verbose_marker_fits(self, label: str, size: str, total_lines: int) -> bool:
        """Whether the full-sentence marker leaves the output at least half the budget."""
        full = self._marker(total_lines, self._total_bytes, label, size, verbose=True)
        return len(full.encode()) <= self._limits.max_bytes // 2

    def _marker(
        self, omitted_lines: int, omitted_bytes: int, label: str, size: str, verbose: bool
    ) -> str:
        """The line that stands for what was left out, and where the whole is kept."""
        cap = self._artifact_max
        path = self._artifact_path
        capped = cap is not None and self._total_bytes > cap
        if not verbose:
            where = "not kept" if path is None else str(path)
            middle = " (middle dropped)" if capped else ""
            return (
                f"\n[... {omitted_lines} lines ({format_size(omitted_bytes)}) omitted; "
                f"full {label}{middle}: {where} ...]\n"
            )
        if path is None:
            where = "the full output was not kept"
        elif cap is not None and capped:
            where = (
                f"the first {format_size(cap - cap // 2)} and the last {format_size(cap // 2)} of "
                f"the {label} ({size}) are saved at {path}, the middle was dropped; "
                "open it with the read tool (path, offset, limit)"
            )
        else:
            where = (
                f"the full {label} ({size}) is saved at {path}; "
                "open it with the read tool (path, offset, limit)"
            )
        omitted = f"{omitted_lines} lines ({format_size(omitted_bytes)}) omitted"
        return f"\n[... {omitted}; {where} ...]\n"

    def _discard_artifact(self) -> None:
        if self._artifact_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._artifact_path)
            self._artifact_path = None


def _nth_newline(data: bytes, n: int) -> int | None:
    """Index of the n-th newline in data, or None when there are fewer."""
    if n <= 0:
        return -1
    pos = -1
    for _ in range(n):
        pos = data.find(b"\n", pos + 1)
        if pos < 0:
            return None
    return pos


def _from_line_start(data: bytes, budget: int) -> bytes:
    """The last budget bytes of data, starting at a line boundary when one is in reach.

    A tail that begins mid-line shows a fragment the reader cannot place; when the
    window holds no line start at all (one very long line), its end is shown as is.
    """
    if len(data) <= budget:
        return data
    window = data[-budget:]
    if data[-budget - 1 : -budget] == b"\n":
        return window
    newline = window.find(b"\n")
    if newline < 0 or newline == len(window) - 1:
        return window
    return window[newline + 1 :]


def _last_lines(data: bytes, n: int) -> bytes:
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    pos = end
    for _ in range(n):
        pos = data.rfind(b"\n", 0, pos)
        if pos < 0:
            return data
    return data[pos + 1 :]


def _decode(data: bytes, strip_partial: bool = False) -> str:
    if strip_partial:
        # A tail cut inside a multi-byte character starts with continuation bytes.
        i = 0
        while i < min(3, len(data)) and 0x80 <= data[i] < 0xC0:
            i += 1
        data = data[i:]
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return decoder.decode(data, final=True)


def bound_text(
    text: str,
    limits: OutputLimits,
    artifact_path: Path | Callable[[], Path] | None = None,
    label: str = "output",
) -> BoundedText:
    """Apply the limits to a text already in memory (the dispatcher's last guard).

    ``artifact_path`` may be a function, called only when the text must be cut.
    """
    if len(text) <= limits.max_bytes // 4 and text.count("\n") < limits.max_lines:
        # Short enough whatever its encoding: no need to encode it to know.
        return BoundedText(text, False, len(text), _count_lines(text, text.endswith("\n")))
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limits.max_bytes and text.count("\n") < limits.max_lines:
        lines = _count_lines(data, data.endswith(b"\n"))
        if lines <= limits.max_lines:
            return BoundedText(text, False, len(data), lines)
    if callable(artifact_path):
        artifact_path = artifact_path()
    bounded = BoundedOutput(limits, artifact_path)
    bounded.feed(data)
    return bounded.finish(label)
