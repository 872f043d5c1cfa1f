"""Running one command with a hard deadline and bounded reading.

:func:`run_process` starts a command in a new session, streams its stdout and
stderr in large chunks to callbacks as they arrive, and enforces a deadline
that cannot be outlived: at the deadline the whole process tree is killed, and
the call returns within a short grace even when an escaped grandchild still
holds the output pipes open (the rest of its output is dropped, and the result
says so).

The pipes are plain non-blocking file descriptors read with
:func:`anyio.wait_readable`, so they can be abandoned at any moment and read
in 256 KiB chunks without an intermediate stream buffer. Callbacks run inline:
handing chunks to a worker thread was measured slower (many small wake-ups
on a fast pipe), so a callback should be quick. Reading 1 MiB at a time, or
into one preallocated buffer, was measured no faster: the cost is the kernel's
copy out of the pipe, about that of ``cat``. Without the short pause after a
short read the loop spins on a fast writer and costs twice the CPU.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.lowlevel

__all__ = ["OutputSink", "ProcessResult", "kill_process_tree", "run_process"]

OutputSink = Callable[[bytes], None]
"""Receives each chunk of a stream, in order, as it is read."""

CHUNK_SIZE = 256 * 1024
"""Bytes asked of a pipe per read: large, so a flood of output costs few wake-ups."""

_PIPE_SIZE = 1024 * 1024
"""Kernel buffer asked for each pipe, so a fast writer rarely waits for us."""

_F_SETPIPE_SZ = 1031

_GATHER_SECONDS = 0.001
"""Pause after a short read while output flows; under the 1 MiB pipe buffer at 1 GB/s."""


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
        if self.signal is None:
            return None
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"


def _proc_stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, process group, session) of pid, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ")".
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[1]), int(fields[2]), int(fields[3])
    except (IndexError, ValueError):
        return None


def _tree_members(root: int) -> set[int]:
    """Processes in root's session or process group, and root's descendants."""
    table: dict[int, tuple[int, int, int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                stat = _proc_stat(int(entry.name))
                if stat is not None:
                    table[int(entry.name)] = stat
    members = {pid for pid, (_, pgrp, sid) in table.items() if root in (pgrp, sid)}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    todo = [root, *members]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in members:
                members.add(child)
                todo.append(child)
    members.discard(os.getpid())
    return members


def _signal_all(pids: set[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def kill_process_tree(root: int) -> None:
    """SIGKILL everything started under root (its group, session and descendants).

    root must lead its own session (started with ``start_new_session``). The
    tree is frozen with SIGSTOP before it is killed: a parent killed first
    would orphan its children, and an orphan in a session of its own could no
    longer be found. A process that had already left the session and been
    orphaned before the kill escapes; the bubblewrap sandbox's PID namespace
    catches those too.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, signal.SIGSTOP)
    frozen: set[int] = set()
    # Repeat until no new member appears: one may have forked before it was stopped.
    for _ in range(5):
        fresh = _tree_members(root) - frozen
        if not fresh:
            break
        _signal_all(fresh, signal.SIGSTOP)
        frozen |= fresh
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, signal.SIGKILL)
    _signal_all(frozen | _tree_members(root), signal.SIGKILL)


def _open_pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    with contextlib.suppress(OSError):
        fcntl.fcntl(read_end, _F_SETPIPE_SZ, _PIPE_SIZE)
    return read_end, write_end


async def _pump(fd: int, sink: OutputSink, done: anyio.Event) -> None:
    """Read fd until end of file, handing each chunk to sink."""
    try:
        while True:
            try:
                data = os.read(fd, CHUNK_SIZE)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                continue
            if not data:
                return
            sink(data)
            if len(data) < CHUNK_SIZE:
                # Output is flowing in small pieces: let it gather for a moment, since
                # each wake-up costs far more than reading a larger chunk.
                await anyio.sleep(_GATHER_SECONDS)
            else:
                # Let the deadline and the other pipe run even under a flood of output.
                await anyio.lowlevel.checkpoint()
    finally:
        done.set()


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    time_limit: float | None,
    on_stdout: OutputSink,
    on_stderr: OutputSink,
    drain_grace: float = 1.0,
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
        )
    except BaseException:
        for fd in (out_read, out_write, err_read, err_write):
            os.close(fd)
        raise
    os.close(out_write)
    os.close(err_write)
    timed_out = False
    abandoned = False
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
    finally:
        with anyio.CancelScope(shield=True):
            kill_process_tree(process.pid)
            with anyio.move_on_after(drain_grace):
                await process.aclose()
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
