"""The searches: files listed, files with matches, counts and lines, in path order.

Every answer is sorted by path (component by component, as ``rg --sort path``
orders them) and then by line, whatever order rg's threads finished in, and
the first *limit* results are the same on every run. Line searches take two
passes (see :func:`search_lines`).
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from zuno.execution.ripgrep._glob import GlobError
from zuno.execution.ripgrep._locate import find_ripgrep_async
from zuno.execution.ripgrep._run import Ripgrep, StreamExit
from zuno.execution.ripgrep._select import Exclusion, Selection, selection_args

__all__ = [
    "FileCount",
    "Line",
    "Query",
    "RipgrepError",
    "SearchResult",
    "count_matches",
    "files_with_matches",
    "list_files",
    "search_lines",
]

T = TypeVar("T")
_K = TypeVar("_K", bytes, tuple[bytes, int])


class RipgrepError(Exception):
    """rg refused the search, typically an invalid regex or glob.

    Attributes:
        message: rg's own explanation (its stderr, trimmed).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Query:
    """What to look for, and in which files.

    Attributes:
        pattern: A Rust-syntax regex, or a literal when ``fixed_strings``.
        fixed_strings: Match ``pattern`` literally.
        ignore_case: Match case-insensitively.
        include: A glob restricting the files searched (``*.py``, ``src/**/*.{ts,tsx}``);
            files the ignore files ignore stay ignored.
        hidden: Also search hidden files and folders (``.git`` itself stays excluded).
        exclusion: Paths never searched nor returned (what permission rules deny).
    """

    pattern: str
    fixed_strings: bool = False
    ignore_case: bool = False
    include: str | None = None
    hidden: bool = False
    exclusion: Exclusion | None = None

    def matcher_args(self) -> list[str]:
        """The rg options choosing how lines match (no file selection)."""
        args: list[str] = []
        if self.fixed_strings:
            args.append("--fixed-strings")
        if self.ignore_case:
            args.append("--ignore-case")
        # --regexp keeps a pattern that starts with "-" from reading as an option.
        args += ["--regexp", self.pattern]
        return args

    def selection(self, *, folder: bool = True) -> Selection:
        """The rg options choosing which files are searched (see :func:`selection_args`).

        Raises:
            RipgrepError: The include glob is malformed.
        """
        return _selection(self.include, self.hidden, self.exclusion, folder)


@dataclass(frozen=True, slots=True)
class Line:
    """One line of a search answer.

    Attributes:
        path: The file, relative to the searched directory, ``/``-separated.
        number: The 1-based line number.
        text: The line without its line ending (undecodable bytes replaced),
            cut to the requested length.
        is_match: True for a matching line, False for a context line.
        omitted_chars: How many characters were cut off the end of ``text``.
    """

    path: str
    number: int
    text: str
    is_match: bool
    omitted_chars: int = 0


@dataclass(frozen=True, slots=True)
class FileCount:
    """How many lines of one file match.

    Attributes:
        path: The file, relative to the searched directory, ``/``-separated.
        count: Its number of matching lines.
    """

    path: str
    count: int


@dataclass(frozen=True, slots=True)
class SearchResult(Generic[T]):
    """The first results of a search, in stable order, and how many there were.

    Attributes:
        items: Results sorted by path, then line.
        shown: How many results ``items`` holds (for lines: matching lines, not context).
        total: How many results the whole search had.
        files: How many files had results.
        unreadable: rg could not read some files (permissions, I/O errors).
    """

    items: list[T]
    shown: int
    total: int
    files: int
    unreadable: bool = False

    @property
    def truncated(self) -> bool:
        """Whether results were left out because of the limit."""
        return self.total > self.shown


@dataclass(frozen=True, slots=True)
class _Target:
    """Where rg runs and what it is given, for a directory or a single file."""

    cwd: Path
    arg: str

    @property
    def folder(self) -> bool:
        """Whether rg searches a folder (not one file named explicitly)."""
        return self.arg == "."

    @classmethod
    def of(cls, root: Path) -> _Target:
        if root.is_dir():
            # Running inside the directory makes globs with a "/" anchor at it.
            return cls(root, ".")
        return cls(root.parent, root.name)


def _search_args(
    mode: Sequence[str], query: Query, selection: Selection, target: _Target
) -> list[str]:
    """rg's arguments: the output ``mode``, then the query's options, then the target."""
    return [*mode, *selection.args, *query.matcher_args(), "--", target.arg]


def _selection(
    include: str | None, hidden: bool, exclusion: Exclusion | None, folder: bool
) -> Selection:
    try:
        return selection_args(include, hidden, exclusion, folder=folder)
    except GlobError as exc:
        raise RipgrepError(str(exc)) from None


_SWAP = bytes.maketrans(b"/\0", b"\0/")
"""Swaps "/" and NUL: rg's NUL-ended paths become "/"-separated sort keys in one pass."""


def _path_key(raw: bytes) -> bytes:
    # NUL sorts below every byte a file name can hold, so comparing with "/" made
    # NUL orders paths component by component, like `rg --sort path` does.
    return raw.replace(b"/", b"\0")


def _display(raw: bytes, errors: str = "replace") -> str:
    if raw.startswith(b"./"):
        raw = raw[2:]
    return raw.decode("utf-8", errors=errors)


class _Smallest(Generic[_K]):
    """The ``limit`` smallest items of a stream, in O(limit) memory.

    Nothing is sorted whole: once ``limit`` items are held, the largest of them
    is a bound, and an item not below it cannot be among the first; the rest
    is cut back to ``limit`` by selection whenever it doubles.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: list[_K] = []
        self._bound: _K | None = None
        self.seen = 0

    def extend(self, items: list[_K]) -> None:
        self.seen += len(items)
        bound = self._bound
        if bound is not None:
            items = [item for item in items if item < bound]
        self._items += items
        # Batches, not an item at a time: a comprehension and a selection now and
        # then cost less in Python than a heap operation per item.
        if len(self._items) >= 2 * self._limit + 1024:
            self._trim()

    def _trim(self) -> None:
        if len(self._items) > self._limit:
            self._items = heapq.nsmallest(self._limit, self._items)
            self._bound = self._items[-1]

    def result(self) -> list[_K]:
        """The smallest ``limit`` items seen, in order."""
        self._trim()
        self._items.sort()
        return self._items


def _check(status: StreamExit) -> None:
    if status.returncode == 2 and status.stderr:
        raise RipgrepError(status.stderr.removeprefix("rg: "))


async def list_files(
    root: Path,
    *,
    glob: str | None = None,
    hidden: bool = False,
    limit: int,
    exclusion: Exclusion | None = None,
    rg: Ripgrep | None = None,
) -> SearchResult[str]:
    """The files under ``root`` that rg would search, as ``rg --files`` lists them.

    Ignore files (.gitignore in a git repository, .ignore, .rgignore) are
    respected and hidden entries skipped unless ``hidden``.

    Args:
        root: The directory to list.
        glob: Only files matching this gitignore-style glob, taken from ``root``
            (files the ignore files ignore stay out).
        hidden: Include hidden files and folders (never ``.git``).
        limit: How many paths to return at most.
        exclusion: Paths never listed.
        rg: The executable; found with :func:`find_ripgrep` when None.

    Returns:
        The first ``limit`` paths in path order, and the total count.

    Raises:
        RipgrepError: rg refused the glob.
    """
    target = _Target.of(root)
    selection = _selection(glob, hidden, exclusion, target.folder)
    rg = rg or await find_ripgrep_async()
    args = ["--files", "--null", *selection.args, "--", target.arg]
    return await _paths(rg, target, args, limit, selection.keep, gather=False)


async def files_with_matches(
    root: Path, query: Query, *, limit: int, rg: Ripgrep | None = None
) -> SearchResult[str]:
    """The files under ``root`` with at least one matching line.

    Args:
        root: The directory or file to search.
        query: What to look for.
        limit: How many paths to return at most.
        rg: The executable; found with :func:`find_ripgrep` when None.

    Returns:
        The first ``limit`` paths in path order, and the total count of files.

    Raises:
        RipgrepError: rg refused the pattern or glob.
    """
    target = _Target.of(root)
    selection = query.selection(folder=target.folder)
    rg = rg or await find_ripgrep_async()
    args = _search_args(["--files-with-matches", "--null"], query, selection, target)
    return await _paths(rg, target, args, limit, selection.keep)


async def _paths(
    rg: Ripgrep,
    target: _Target,
    args: list[str],
    limit: int,
    keep: Callable[[bytes], bool] | None,
    *,
    gather: bool = True,
) -> SearchResult[str]:
    """Run rg printing NUL-ended paths; keep the first ``limit`` in path order."""
    smallest: _Smallest[bytes] = _Smallest(limit)

    def consume(records: list[bytes]) -> bool:
        if keep is not None:
            records = [raw for raw in records if keep(raw)]
        if records:
            # One pass over the batch turns every path into its sort key.
            smallest.extend(b"\0".join(records).translate(_SWAP).split(b"/"))
        return True

    status = await rg.stream(args, cwd=target.cwd, consume=consume, separator=b"\0", gather=gather)
    _check(status)
    paths = [_display(key.translate(_SWAP)) for key in smallest.result()]
    return SearchResult(paths, len(paths), smallest.seen, smallest.seen, status.unreadable)


async def _counts(
    rg: Ripgrep, target: _Target, query: Query, limit: int
) -> tuple[list[tuple[bytes, int]], int, int, StreamExit]:
    """The first ``limit`` files by path with their raw path and count; total lines and files."""
    smallest: _Smallest[tuple[bytes, int]] = _Smallest(limit)
    total = 0
    carry = b""
    selection = query.selection(folder=target.folder)
    keep = selection.keep

    def consume(records: list[bytes]) -> bool:
        nonlocal total, carry
        found: list[tuple[bytes, int]] = []
        for record in records:
            # Records are "path NUL count"; a path may itself hold a newline.
            if carry:
                record = carry + b"\n" + record
                carry = b""
            raw, nul, count = record.rpartition(b"\0")
            if not nul:
                carry = record
                continue
            if keep is not None and not keep(raw):
                continue
            n = int(count)
            total += n
            found.append((_path_key(raw), n))
        smallest.extend(found)
        return True

    args = _search_args(["--count", "--with-filename", "--null"], query, selection, target)
    status = await rg.stream(args, cwd=target.cwd, consume=consume)
    _check(status)
    found = [(key.replace(b"\0", b"/"), n) for key, n in smallest.result()]
    return found, total, smallest.seen, status


async def count_matches(
    root: Path, query: Query, *, limit: int, rg: Ripgrep | None = None
) -> SearchResult[FileCount]:
    """How many lines match in each file under ``root``.

    Args:
        root: The directory or file to search.
        query: What to look for.
        limit: How many files to return at most.
        rg: The executable; found with :func:`find_ripgrep` when None.

    Returns:
        The first ``limit`` files in path order with their counts; ``total`` is
        the number of files with matches.

    Raises:
        RipgrepError: rg refused the pattern or glob.
    """
    rg = rg or await find_ripgrep_async()
    found, _lines, files, status = await _counts(rg, _Target.of(root), query, limit)
    items = [FileCount(_display(raw), n) for raw, n in found]
    return SearchResult(items, len(items), files, files, status.unreadable)


async def search_lines(
    root: Path,
    query: Query,
    *,
    limit: int,
    context: int = 0,
    max_line_chars: int = 1000,
    rg: Ripgrep | None = None,
) -> SearchResult[Line]:
    """The first ``limit`` matching lines under ``root`` in path order, with context.

    Two rg runs: ``--count`` over the whole tree decides which files hold the
    first ``limit`` matches, then ``--json`` reads only those files and is
    stopped as soon as each has given its share. Both runs are multi-threaded.

    Args:
        root: The directory or file to search.
        query: What to look for.
        limit: How many matching lines to return at most.
        context: Lines of context before and after each match.
        max_line_chars: Longer lines are cut to this many characters.
        rg: The executable; found with :func:`find_ripgrep` when None.

    Returns:
        Matching and context lines sorted by path and line; ``shown`` and
        ``total`` count matching lines only.

    Raises:
        RipgrepError: rg refused the pattern or glob.
    """
    rg = rg or await find_ripgrep_async()
    target = _Target.of(root)
    found, total, files, first = await _counts(rg, target, query, limit)
    if not found:
        return SearchResult([], 0, total, files, first.unreadable)
    # Each chosen file gives at most the count the first pass saw: that keeps the
    # two passes consistent (an explicitly named binary file is searched further
    # by rg than one met while walking) and caps the last file at the limit.
    quotas: dict[bytes, int] = {}
    room = limit
    for raw, n in found:
        if room <= 0:
            break
        quotas[raw] = min(n, room)
        room -= quotas[raw]
    reader = _JsonLines(quotas, context, max_line_chars)
    # No file needs more lines than its quota; rg may stop reading each file there.
    args: list[str | bytes] = ["--json", f"--max-count={max(quotas.values())}"]
    args += query.matcher_args()
    if context:
        args += ["--context", str(context)]
    args += ["--", *quotas]
    second = await rg.stream(args, cwd=target.cwd, consume=reader.consume)
    _check(second)
    lines = sorted(reader.lines, key=lambda item: (_path_key(item[0]), item[1].number))
    shown = sum(1 for _, line in lines if line.is_match)
    return SearchResult(
        [line for _, line in lines],
        shown,
        max(total, shown),
        files,
        first.unreadable or second.unreadable,
    )


class _JsonLines:
    """Decodes ``rg --json`` records, keeping each file's first ``quota`` matches."""

    def __init__(self, quotas: dict[bytes, int], context: int, max_line_chars: int) -> None:
        self._left = dict(quotas)
        self._context = context
        self._last_match: dict[bytes, int] = {}
        self._open = len(quotas)
        self._max = max_line_chars
        self.lines: list[tuple[bytes, Line]] = []

    def consume(self, records: list[bytes]) -> bool:
        """Take a batch of records; False once every file has given its share."""
        for record in records:
            self._one(record)
            if self._open == 0:
                return False
        return True

    def _one(self, record: bytes) -> None:
        message: dict[str, Any] = json.loads(record)
        kind = message.get("type")
        if kind not in ("match", "context", "end"):
            return
        data: dict[str, Any] = message["data"]
        raw = _field_bytes(data["path"])
        left = self._left.get(raw)
        if left is None:  # a file that is done, or one we never asked for
            return
        if kind == "end" or (kind == "match" and left == 0):
            self._close(raw)
            return
        number = int(data["line_number"])
        if kind == "match":
            self._left[raw] = left - 1
            self._last_match[raw] = number
        elif left == 0 and number > self._last_match[raw] + self._context:
            # Leading context of a match past the quota: it belongs to nothing we show.
            return
        text, omitted = self._text(data["lines"])
        self.lines.append((raw, Line(_display(raw), number, text, kind == "match", omitted)))

    def _close(self, raw: bytes) -> None:
        del self._left[raw]
        self._open -= 1

    def _text(self, field: dict[str, Any]) -> tuple[str, int]:
        if "text" in field:
            text = str(field["text"])
        else:
            text = _field_bytes(field).decode("utf-8", errors="replace")
        text = text.rstrip("\n").removesuffix("\r")
        if len(text) > self._max:
            return text[: self._max], len(text) - self._max
        return text, 0


def _field_bytes(field: dict[str, Any]) -> bytes:
    """The bytes of an rg JSON "arbitrary data" field: ``{"text": ...}`` or ``{"bytes": b64}``."""
    if "text" in field:
        return str(field["text"]).encode("utf-8", errors="surrogateescape")
    try:
        return base64.b64decode(str(field["bytes"]))
    except (binascii.Error, KeyError):
        return b""
