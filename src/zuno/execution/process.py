"""Running one command with a hard deadline and bounded reading.

:func:`run_process` starts a command in a new session, streams its stdout and
stderr in large chunks to callbacks as they arrive, and enforces a deadline
that cannot be outlived: at the deadline the whole process tree is killed, and
the call returns within a short grace even when an escaped grandchild still
holds the output pipes open (the rest of its output is dropped, and the result
says so).

Each pipe is read by a worker thread, the way ``cat`` reads: a non-blocking
read of up to 1 MiB (the pipe's whole buffer) as soon as anything is there, the
chunk handed to a callback in that thread (so a callback must not touch the
event loop, and whatever it does to the chunk, writing it to an artifact and
keeping the part the model sees, happens in this one loop), and a wait on
poll(2) when the pipe is empty. This was measured against reading on the event
loop: the loop's wake-ups cost several times more per read, and the pause after
a short read that made up for them starved a fast writer, whose 1 MiB pipe
buffer fills in about a millisecond. In the thread, a read that found the pipe
far from full is followed by a pause of half a millisecond, so a command
printing in small writes is read in a few large chunks rather than tens of
thousands of small ones (the writer cannot fill 1 MiB in that time); a
command printing a line now and then is read at once all the same, half a
millisecond late at most. The thread checks every 50 ms whether it was told
to stop, so a pipe held open by an escaped process can be given up; the pipe
is closed only after its thread has let go of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

from zuno.core.process_tree import kill_process_tree, proc_stat
from zuno.durability import fencing

__all__ = [
    "OutputSink",
    "ProcessResult",
    "kill_process_tree",
    "proc_stat",
    "run_process",
    "signal_label",
]

OutputSink = Callable[[bytes], None]
"""Receives each chunk of a stream, in order, as it is read."""

_PIPE_SIZE = 1024 * 1024
"""Kernel buffer asked for each pipe, so a fast writer rarely waits for us."""

CHUNK_SIZE = _PIPE_SIZE
"""Bytes asked of a pipe per read: all it can hold, so a flood of output costs few wake-ups."""

_SHORT_READ = CHUNK_SIZE // 8
"""A read below this found the pipe nearly empty: the writer is slower than the reader."""

_GATHER_S = 0.0005
"""The pause after a short read, letting a fast writer put more in the pipe (a writer
at 1 GB/s puts in half of the buffer): one read then takes what would have been dozens."""

_F_SETPIPE_SZ = 1031
_F_GETPIPE_SZ = 1032

_STOP_POLL_MS = 50
"""How often a reading thread waiting on an empty pipe checks whether to stop."""


@dataclass(frozen=True, slots=True)
class ProcessResult:
    """How a command ended.

    Attributes:
        exit_code: The exit status, or None when a signal ended the command.
        signal: The number of the signal that ended it, or None.
        timed_out: Whether the deadline passed and the process tree was killed.
        output_abandoned: Whether something still held the output pipes open
            after the kill, so that output after that point was not read.
        elapsed: Seconds from start to the end of reading.
    """

    exit_code: int | None
    signal: int | None
    timed_out: bool
    output_abandoned: bool
    elapsed: float

    @property
    def signal_name(self) -> str | None:
        """The signal's name (``SIGKILL``), or None."""
        return signal_label(self.signal)


def signal_label(number: int | None) -> str | None:
    """A signal's name (``SIGKILL``; ``signal 77`` for one Python does not know), or None."""
    if number is None:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _open_pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    with contextlib.suppress(OSError):
        fcntl.fcntl(read_end, _F_SETPIPE_SZ, _PIPE_SIZE)
    return read_end, write_end


class _Reader:
    """What a pipe's reading thread and the task awaiting it share.

    The task may give up on the thread before it ran; the lock decides which
    of the two then owns the pipe, so a closed descriptor number is never read.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = False
        self.stop = threading.Event()
        self.finished = threading.Event()

    def begin(self) -> bool:
        """Called by the thread first: whether it may read (it was not given up on)."""
        with self._lock:
            self._started = not self.stop.is_set()
            return self._started

    def give_up(self) -> bool:
        """Tell the thread to stop; whether it is (or was) reading and must be waited for."""
        with self._lock:
            self.stop.set()
            return self._started


def _read_until_eof(fd: int, sink: OutputSink, reader: _Reader) -> None:
    """Read fd until end of file or until told to stop, in a worker thread."""
    if not reader.begin():
        return
    try:
        waiter = select.poll()
        waiter.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        # Pausing is only safe when the pipe can hold what the writer puts in meanwhile.
        gather = _pipe_size(fd) >= _PIPE_SIZE
        while not reader.stop.is_set():
            try:
                data = os.read(fd, CHUNK_SIZE)
            except BlockingIOError:
                waiter.poll(_STOP_POLL_MS)
                continue
            if not data:
                return
            sink(data)
            if gather and len(data) < _SHORT_READ:
                time.sleep(_GATHER_S)
    finally:
        reader.finished.set()


def _pipe_size(fd: int) -> int:
    try:
        return fcntl.fcntl(fd, _F_GETPIPE_SZ)
    except OSError:
        return 0


async def _pump(fd: int, sink: OutputSink, done: anyio.Event) -> None:
    """Read fd until end of file in a worker thread, handing each chunk to sink.

    When this returns, the thread no longer touches fd (the caller closes it).
    """
    reader = _Reader()
    try:
        await anyio.to_thread.run_sync(
            _read_until_eof,
            fd,
            sink,
            reader,
            abandon_on_cancel=True,
            limiter=anyio.CapacityLimiter(1),
        )
    finally:
        if reader.give_up() and not reader.finished.is_set():
            with anyio.CancelScope(shield=True):
                # At most one stop check away (the thread closes nothing itself).
                await anyio.to_thread.run_sync(
                    reader.finished.wait, limiter=anyio.CapacityLimiter(1)
                )
        done.set()


def _drain(fd: int, sink: OutputSink, limit: int = 2 * _PIPE_SIZE) -> None:
    """Hand on what is already in a pipe, without waiting (at most limit bytes)."""
    taken = 0
    while taken < limit:
        try:
            data = os.read(fd, CHUNK_SIZE)
        except OSError:  # empty for now (EAGAIN), or gone
            return
        if not data:
            return
        sink(data)
        taken += len(data)


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    time_limit: float | None,
    on_stdout: OutputSink,
    on_stderr: OutputSink,
    drain_grace: float = 1.0,
    pass_fds: Sequence[int] = (),
) -> ProcessResult:
    """Run argv to completion or to its deadline, streaming its output.

    The command gets /dev/null as stdin and its own session. It is finished
    when it has exited and both pipes reached end of file. Anything it leaves
    running is killed then, and so is its whole tree at the deadline or when
    the caller is cancelled.

    Args:
        argv: The program and its arguments.
        cwd: The working directory.
        env: The complete environment.
        time_limit: Seconds before the tree is killed; None for no deadline. A
            number rather than the caller's cancel scope, because the deadline
            must end in a kill and a result carrying the partial output, not
            in a cancellation.
        on_stdout: Receives stdout chunks.
        on_stderr: Receives stderr chunks.
        drain_grace: Seconds to keep reading after a kill before giving up on
            pipes held open by a process that escaped the kill.
        pass_fds: Descriptors the process inherits (see
            :attr:`zuno.execution.sandbox.Launch.pass_fds`).

    Raises:
        OSError: The program could not be started.
    """
    started = anyio.current_time()
    out_read, out_write = _open_pipe()
    err_read, err_write = _open_pipe()
    try:
        process = await anyio.open_process(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out_write,
            stderr=err_write,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    except BaseException:
        for fd in (out_read, out_write, err_read, err_write):
            os.close(fd)
        raise
    os.close(out_write)
    os.close(err_write)
    fencing.register_group(process.pid)  # killed if this worker's lease lapses
    timed_out = False
    abandoned = False
    cancelled = False
    try:
        out_done, err_done = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as reading:
            reading.start_soon(_pump, out_read, on_stdout, out_done)
            reading.start_soon(_pump, err_read, on_stderr, err_done)
            with anyio.move_on_after(time_limit) as deadline:
                await process.wait()
                await out_done.wait()
                await err_done.wait()
            timed_out = deadline.cancelled_caught
            kill_process_tree(process.pid)
            with anyio.move_on_after(drain_grace):
                await out_done.wait()
                await err_done.wait()
            abandoned = not (out_done.is_set() and err_done.is_set())
            # Stops pumps blocked on pipes that a process which escaped the kill holds open.
            reading.cancel_scope.cancel()
    except anyio.get_cancelled_exc_class():
        cancelled = True
        raise
    finally:
        with anyio.CancelScope(shield=True):
            kill_process_tree(process.pid)
            with anyio.move_on_after(drain_grace):
                await process.aclose()
            fencing.forget_group(process.pid)
            if cancelled:
                # What the command printed before the cancellation may still sit in
                # the pipes (the readers stop at once): hand it on, so it is kept.
                _drain(out_read, on_stdout)
                _drain(err_read, on_stderr)
            os.close(out_read)
            os.close(err_read)
    code = process.returncode
    return ProcessResult(
        exit_code=code if code is not None and code >= 0 else None,
        signal=-code if code is not None and code < 0 else None,
        timed_out=timed_out,
        output_abandoned=abandoned,
        elapsed=anyio.current_time() - started,
    )
