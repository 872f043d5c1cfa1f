"""Driving the official ``rg`` executable: locating it, invoking it, decoding it.

Zuno never walks a tree or matches a regex itself. ``glob`` and ``grep`` run
ripgrep 14 or newer; this module contributes only what rg does not give us:

- locating it (:func:`find_ripgrep`): ``$ZUNO_RG`` if set, else the ``rg`` of
  the running environment (the ``ripgrep`` wheel installs it beside the
  interpreter), else ``PATH``. A missing or too-old rg raises
  :class:`RipgrepUnavailable`; there is no slower fallback walker, on purpose.
- typed, cancellable invocation (:meth:`Ripgrep.stream`): output is decoded
  record by record as it arrives and rg is killed as soon as the caller has
  enough, or when the surrounding task is cancelled.
- stable ordering: every answer is sorted by path (component by component, as
  ``rg --sort path`` orders them) and then by line, whatever order rg's threads
  finished in, and the first *limit* results are the same on every run.

Why not ``rg --sort path``: it makes rg single-threaded (about 2x slower on the
Python stdlib). Instead rg runs multi-threaded and the results are sorted here,
keeping only the smallest *limit* keys in memory. For line searches that means
two passes: a cheap ``--count`` pass over the whole tree picks the files that
hold the first *limit* matches in path order, then a ``--json`` pass reads
lines from those files only, and is killed once every file has given its
share. The second pass is small unless the limit is. Should files change
between the passes, a file still gives no more lines than the first pass
counted, so the answer stays within the limit.

Exceptions::

    RipgrepUnavailable  rg is missing or older than 14 (a startup error)
    RipgrepError        rg refused the search: an invalid regex or glob
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import anyio
import anyio.to_thread
from anyio.abc import ByteReceiveStream

__all__ = [
    "INSTALL_HINT",
    "MINIMUM_VERSION",
    "FileCount",
    "Line",
    "Query",
    "Ripgrep",
    "RipgrepError",
    "RipgrepUnavailable",
    "SearchResult",
    "StreamExit",
    "count_matches",
    "files_with_matches",
    "find_ripgrep",
    "list_files",
    "parse_version",
    "search_lines",
]

MINIMUM_VERSION: tuple[int, int, int] = (14, 0, 0)
"""The oldest rg accepted. 13 lacks behaviour the tools rely on (and Debian ships it)."""

INSTALL_HINT = (
    "install ripgrep 14 with `pip install ripgrep==14.1.0` "
    "(or `pip install --only-binary=ripgrep ripgrep`), put an rg >= 14 on PATH, "
    "or set ZUNO_RG to the path of one"
)

_ENV_VAR = "ZUNO_RG"
_SMALL_READ = 16384
_SMALL_READ_PAUSE = 0.001  # seconds; also the most it adds to a run's wall time
_VERSION_RE = re.compile(r"ripgrep\s+(\d+)\.(\d+)\.(\d+)")

# Options every invocation gets: ignore the user's RIPGREP_CONFIG_PATH (it could
# change the output format under us), and no per-file "permission denied" noise
# on stderr, so that anything on stderr is a real refusal (bad regex or glob).
_BASE_ARGS = ("--no-config", "--no-messages", "--color=never")

T = TypeVar("T")
_K = TypeVar("_K", bytes, tuple[bytes, int])


class RipgrepUnavailable(RuntimeError):
    """No usable rg: it is missing, cannot run, or is older than 14."""


class RipgrepError(Exception):
    """rg refused the search, typically an invalid regex or glob.

    Attributes:
        message: rg's own explanation (its stderr, trimmed).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# --------------------------------------------------------------------------- locating


def parse_version(text: str) -> tuple[int, int, int] | None:
    """The version in the output of ``rg --version``, or None when there is none.

    Args:
        text: What ``rg --version`` printed, e.g. ``"ripgrep 14.1.0 (rev ...)"``.

    Returns:
        ``(major, minor, patch)``, or None if the text names no ripgrep version.
    """
    found = _VERSION_RE.search(text)
    if found is None:
        return None
    return (int(found.group(1)), int(found.group(2)), int(found.group(3)))


@dataclass(frozen=True, slots=True)
class StreamExit:
    """How one rg run ended.

    Attributes:
        returncode: rg's exit status (0 found, 1 nothing found, 2 error); None if killed.
        stopped: True when the consumer had enough and rg was killed early.
        stderr: What rg wrote to stderr (the first few KiB).
    """

    returncode: int | None
    stopped: bool
    stderr: str

    @property
    def unreadable(self) -> bool:
        """Whether rg skipped files it could not read (status 2 with nothing on stderr)."""
        return self.returncode == 2 and not self.stderr


@dataclass(frozen=True, slots=True)
class Ripgrep:
    """A probed rg executable of a supported version.

    Attributes:
        path: The executable.
        version: Its version, at least :data:`MINIMUM_VERSION`.
    """

    path: Path
    version: tuple[int, int, int]

    async def stream(
        self,
        args: Sequence[str | bytes],
        *,
        cwd: Path,
        consume: Callable[[list[bytes]], bool],
        separator: bytes = b"\n",
    ) -> StreamExit:
        """Run rg and hand its stdout to ``consume``, a batch of records at a time.

        Output is never held whole: records are cut out of each chunk as it
        arrives. rg is killed as soon as ``consume`` returns False, and also if
        the calling task is cancelled (the cancellation then propagates).

        Args:
            args: Arguments after ``rg`` (the base options are added here).
            cwd: The directory rg runs in; relative paths and globs are taken from it.
            consume: Called with the complete records of each chunk read, without
                their separators; return False to stop rg. It runs in a worker
                thread, one call at a time, and must not touch the event loop.
            separator: What ends a record: ``b"\\n"`` for ``--json``, ``b"\\0"``
                for ``--null`` file lists.

        Returns:
            How rg ended.
        """
        command: list[str | bytes] = [str(self.path), *_BASE_ARGS, *args]
        # stdout is a pipe of our own, read by blocking reads in a worker thread:
        # rg writes one small piece per file, and an event-loop wakeup per piece
        # cost about twice the Python CPU (measured on the stdlib), which competes
        # with rg's own threads for the cores. The process itself is anyio's.
        read_fd, write_fd = os.pipe()
        try:
            process = await anyio.open_process(
                command,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=write_fd,
                stderr=subprocess.PIPE,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            # Only rg holds the write end now, so its exit is our end of file.
            os.close(write_fd)
        reader = _Reader(read_fd, separator, consume)
        stderr = bytearray()
        stopped = False
        try:
            assert process.stderr is not None
            async with anyio.create_task_group() as tg:
                # stderr is drained beside stdout so a chatty rg can never block on it.
                tg.start_soon(_drain, process.stderr, stderr)
                # Abandoned on cancellation: the finally below kills rg, which ends the read.
                stopped = await anyio.to_thread.run_sync(reader.run, abandon_on_cancel=True)
                if stopped:
                    _kill(process)
            returncode = await process.wait()
        finally:
            # Also reached on cancellation: rg must not outlive the call.
            with anyio.CancelScope(shield=True):
                _kill(process)
                await process.wait()
                await anyio.to_thread.run_sync(reader.settle)
                os.close(read_fd)
                await process.aclose()
        return StreamExit(
            None if stopped else returncode,
            stopped,
            stderr.decode("utf-8", errors="replace").strip(),
        )


def _kill(process: anyio.abc.Process) -> None:
    # Not process.kill(): subprocess polls (reaps) the child before signalling it,
    # racing asyncio's child watcher, which then logs "Unknown child process" and
    # loses the status. A child not yet reaped keeps its pid, so this is safe.
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)


async def _drain(stream: ByteReceiveStream, into: bytearray, keep: int = 8192) -> None:
    async for chunk in stream:
        if len(into) < keep:
            into += chunk[: keep - len(into)]


class _Reader:
    """Blocking reads of rg's stdout, cut into records, run in a worker thread."""

    def __init__(self, fd: int, separator: bytes, consume: Callable[[list[bytes]], bool]) -> None:
        self._fd = fd
        self._separator = separator
        self._consume = consume
        self._lock = threading.Lock()
        self._state: Literal["pending", "running", "done", "abandoned"] = "pending"
        self._finished = threading.Event()

    def run(self) -> bool:
        """Feed the consumer until end of file; True when it asked to stop."""
        with self._lock:
            if self._state == "abandoned":
                return False
            self._state = "running"
        try:
            pending = b""
            while chunk := os.read(self._fd, 1 << 16):
                records = (pending + chunk).split(self._separator)
                pending = records.pop()
                if records and not self._consume(records):
                    return True
                if len(chunk) < _SMALL_READ:
                    # rg writes once per file in some modes (--count: 16k writes on
                    # the stdlib). Waking for each costs more CPU than rg's search;
                    # a short pause lets the pipe gather many into one read.
                    time.sleep(_SMALL_READ_PAUSE)
            return bool(pending) and not self._consume([pending])
        finally:
            with self._lock:
                self._state = "done"
            self._finished.set()

    def settle(self) -> None:
        """Block until no thread reads the pipe any more (call once rg is dead)."""
        with self._lock:
            if self._state == "pending":
                # A cancelled job may never be started by the worker thread at all.
                self._state = "abandoned"
                return
        self._finished.wait()


_cache: dict[str | None, Ripgrep | RipgrepUnavailable] = {}
_cache_lock = threading.Lock()


def find_ripgrep(*, refresh: bool = False) -> Ripgrep:
    """Locate and probe rg >= 14, once per process.

    The order is: ``$ZUNO_RG`` (a path or a command name; when set it is the
    only candidate), then ``rg`` beside the running interpreter and in the
    environment's scripts folder (where the ``ripgrep`` wheel puts it), then
    ``rg`` on ``PATH``. The answer, a failure included, is cached; pass
    ``refresh=True`` after installing rg.

    Returns:
        The probed executable.

    Raises:
        RipgrepUnavailable: No candidate exists, runs, or is new enough. The
            message says what was found and how to install a suitable rg.
    """
    key = os.environ.get(_ENV_VAR) or None
    with _cache_lock:
        cached = None if refresh else _cache.get(key)
        if cached is None:
            cached = _probe_candidates(key)
            _cache[key] = cached
    if isinstance(cached, RipgrepUnavailable):
        raise cached
    return cached


async def _find_ripgrep_async() -> Ripgrep:
    # The first probe runs a subprocess synchronously; keep it off the event loop.
    return await anyio.to_thread.run_sync(find_ripgrep)


def _candidates(override: str | None) -> list[Path]:
    if override is not None:
        resolved = shutil.which(override) if os.sep not in override else override
        return [Path(resolved or override)]
    found: list[Path] = []
    # Not resolved: in a venv sys.executable is a symlink and rg sits beside the link.
    for folder in (Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))):
        found.append(folder / "rg")
    on_path = shutil.which("rg")
    if on_path is not None:
        found.append(Path(on_path))
    unique: list[Path] = []
    for path in found:
        if path not in unique:
            unique.append(path)
    return unique


def _probe_candidates(override: str | None) -> Ripgrep | RipgrepUnavailable:
    problems: list[str] = []
    for path in _candidates(override):
        if not (path.is_file() and os.access(path, os.X_OK)):
            if override is not None:
                problems.append(f"{_ENV_VAR}={override} is not an executable file")
            continue
        probed = _probe(path)
        if isinstance(probed, Ripgrep):
            return probed
        problems.append(probed)
    if not problems:
        problems.append("no rg was found beside the Python interpreter or on PATH")
    return RipgrepUnavailable(f"ripgrep >= 14 is required: {'; '.join(problems)}; {INSTALL_HINT}")


def _probe(path: Path) -> Ripgrep | str:
    """The probed rg at ``path``, or why it cannot be used."""
    try:
        done = subprocess.run(
            [str(path), "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path} could not be run ({exc})"
    version = parse_version(done.stdout.decode("utf-8", errors="replace"))
    if done.returncode != 0 or version is None:
        return f"{path} did not report a ripgrep version"
    if version < MINIMUM_VERSION:
        return f"{path} is ripgrep {'.'.join(map(str, version))}, too old"
    return Ripgrep(path, version)


# --------------------------------------------------------------------------- queries


@dataclass(frozen=True, slots=True)
class Query:
    """What to look for, and in which files.

    Attributes:
        pattern: A Rust-syntax regex, or a literal when ``fixed_strings``.
        fixed_strings: Match ``pattern`` literally.
        ignore_case: Match case-insensitively.
        include: A glob restricting the files searched (``*.py``, ``src/**/*.{ts,tsx}``).
        hidden: Also search hidden files and folders (``.git`` itself stays excluded).
    """

    pattern: str
    fixed_strings: bool = False
    ignore_case: bool = False
    include: str | None = None
    hidden: bool = False

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

    def selection_args(self) -> list[str]:
        """The rg options choosing which files are searched."""
        return _selection_args(self.include, self.hidden)


def _selection_args(glob: str | None, hidden: bool) -> list[str]:
    args: list[str] = []
    if glob is not None:
        args += ["--glob", glob]
    if hidden:
        # rg's --hidden would also descend into .git, which nobody wants searched.
        args += ["--hidden", "--glob", "!.git"]
    return args


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

    @classmethod
    def of(cls, root: Path) -> _Target:
        if root.is_dir():
            # Running inside the directory makes globs with a "/" anchor at it.
            return cls(root, ".")
        return cls(root.parent, root.name)


def _path_key(raw: bytes) -> bytes:
    # NUL sorts below every byte a file name can hold, so comparing with "/" made
    # NUL orders paths component by component, like `rg --sort path` does.
    return raw.replace(b"/", b"\0")


def _display(raw: bytes) -> str:
    if raw.startswith(b"./"):
        raw = raw[2:]
    return raw.decode("utf-8", errors="replace")


class _Smallest(Generic[_K]):
    """The ``limit`` smallest items of a stream, in O(limit) memory."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._items: list[_K] = []
        self.seen = 0

    def extend(self, items: list[_K]) -> None:
        self.seen += len(items)
        self._items += items
        # Trimming by sort in batches is much cheaper in Python than a heap per item.
        if len(self._items) >= 2 * self._limit + 4096:
            self._trim()

    def _trim(self) -> None:
        self._items.sort()
        del self._items[self._limit :]

    def result(self) -> list[_K]:
        self._trim()
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
    rg: Ripgrep | None = None,
) -> SearchResult[str]:
    """The files under ``root`` that rg would search, as ``rg --files`` lists them.

    Ignore files (.gitignore in a git repository, .ignore, .rgignore) are
    respected and hidden entries skipped unless ``hidden``.

    Args:
        root: The directory to list.
        glob: Only files matching this gitignore-style glob, taken from ``root``.
        hidden: Include hidden files and folders (never ``.git``).
        limit: How many paths to return at most.
        rg: The executable; found with :func:`find_ripgrep` when None.

    Returns:
        The first ``limit`` paths in path order, and the total count.

    Raises:
        RipgrepError: rg refused the glob.
    """
    rg = rg or await _find_ripgrep_async()
    target = _Target.of(root)
    args = ["--files", "--null", *_selection_args(glob, hidden), "--", target.arg]
    return await _paths(rg, target, args, limit)


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
    rg = rg or await _find_ripgrep_async()
    target = _Target.of(root)
    args = [
        "--files-with-matches",
        "--null",
        *query.selection_args(),
        *query.matcher_args(),
        "--",
        target.arg,
    ]
    return await _paths(rg, target, args, limit)


async def _paths(rg: Ripgrep, target: _Target, args: list[str], limit: int) -> SearchResult[str]:
    """Run rg printing NUL-ended paths; keep the first ``limit`` in path order."""
    smallest: _Smallest[bytes] = _Smallest(limit)

    def consume(records: list[bytes]) -> bool:
        smallest.extend([_path_key(raw) for raw in records])
        return True

    status = await rg.stream(args, cwd=target.cwd, consume=consume, separator=b"\0")
    _check(status)
    paths = [_display(key.replace(b"\0", b"/")) for key in smallest.result()]
    return SearchResult(paths, len(paths), smallest.seen, smallest.seen, status.unreadable)


async def _counts(
    rg: Ripgrep, target: _Target, query: Query, limit: int
) -> tuple[list[tuple[bytes, int]], int, int, StreamExit]:
    """The first ``limit`` files by path with their raw path and count; total lines and files."""
    smallest: _Smallest[tuple[bytes, int]] = _Smallest(limit)
    total = 0
    carry = b""

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
            n = int(count)
            total += n
            found.append((_path_key(raw), n))
        smallest.extend(found)
        return True

    args = [
        "--count",
        "--with-filename",
        "--null",
        *query.selection_args(),
        *query.matcher_args(),
        "--",
        target.arg,
    ]
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
    rg = rg or await _find_ripgrep_async()
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
    rg = rg or await _find_ripgrep_async()
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
