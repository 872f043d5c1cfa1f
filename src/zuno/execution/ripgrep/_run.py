"""Running a probed rg: its output decoded record by record, and killed when done.

rg's stdout is read by blocking reads in a worker thread and cut into records
as it arrives; rg is killed as soon as the consumer has enough, or when the
calling task is cancelled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import anyio
import anyio.to_thread
from anyio.abc import ByteReceiveStream

__all__ = ["Ripgrep", "StreamExit"]

_SMALL_READ = 16384
_SMALL_READ_PAUSE = 0.001  # seconds; also the most it adds to a run's wall time

# Options every invocation gets: ignore the user's RIPGREP_CONFIG_PATH (it could
# change the output format under us), and no per-file "permission denied" noise
# on stderr, so that anything on stderr is a real refusal (bad regex or glob).
_BASE_ARGS = ("--no-config", "--no-messages", "--color=never")


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
        gather: bool = True,
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
            gather: After a small read, pause a moment so that rg's small writes
                (one per file when searching) arrive together. ``--files``
                writes full buffers: there the pause only delays the answer.

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
        reader = _Reader(read_fd, separator, consume, _SMALL_READ if gather else 0)
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

    def __init__(
        self,
        fd: int,
        separator: bytes,
        consume: Callable[[list[bytes]], bool],
        small: int = _SMALL_READ,
    ) -> None:
        self._fd = fd
        self._separator = separator
        self._consume = consume
        self._small = small
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
                if len(chunk) < self._small:
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
