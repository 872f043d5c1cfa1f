"""Interactive processes: started once, typed into and read from across calls.

``exec_command`` starts a process that outlives its call (see
:mod:`zuno.tools.exec`); an :class:`InteractiveProcess` is one of them, kept by
its runtime's :class:`~zuno.execution.process_table.ProcessTable`.

Starting. The command runs under the same sandbox, policy and environment as
``shell`` (:func:`zuno.execution.sandbox.prepared_launch`, held open while the process
lives), in a session of its own so that its whole tree can be killed. With a
terminal (the default) its stdin, stdout and stderr are the slave side of a
fresh pseudo-terminal; a tiny launcher inside the sandbox makes that terminal
the command's controlling terminal, so Ctrl-C (``\\u0003``) interrupts the
foreground job and Ctrl-D ends input, as at a keyboard. Without a terminal
(``tty=false``) stdin is a pipe and stdout and stderr share one pipe. In
``proxy`` network mode the process gets its own egress proxy, as a ``shell``
command does, served on a thread of its own for as long as the process lives;
each call reports the connections that ended since the previous one
(:meth:`InteractiveProcess.take_egress`).

Deadline and reaping. Every process has a hard deadline (the call's
``timeout``, bounded as for ``shell``); a reader thread enforces it even when
nobody polls. A process that ends, is killed (``exec_kill``), passes its
deadline, or is still running when the runtime ends (``async with runtime``
closes the table) is killed with everything it started
(:func:`zuno.execution.process.kill_process_tree`) and reaped. A Zuno process that dies
without cleaning up (SIGKILL) takes its processes along: bubblewrap's
``--die-with-parent``, the Landlock helper's parent-death signal (the kernel
then kills everything left in the command's PID namespace), and without a
sandbox the guard of :mod:`zuno.execution.sandbox.none`, which kills everything below it.
The processes of a runtime, how many may run, and their rows in the store:
:mod:`zuno.execution.process_table`.

Waiting for input. A process blocked reading its terminal (or its stdin
pipe), with nothing typed left unread and no new output, is reported at once
as waiting for input instead of running out the call's ``yield_ms``. It is
seen from ``/proc`` (:mod:`zuno.execution.input_wait`). The verdict must hold on
three looks a tick apart, and shortly after typing it also waits for the
typed text to be taken or a short settle time, because the terminal hands
input on asynchronously. Where ``/proc`` cannot be read, nothing is
detected and the call simply waits ``yield_ms``.

Output. Everything the process prints is appended to a transcript file (the
raw bytes, capped like a command's artifact at
``tool_output.artifact_max_bytes``). Each call returns only what is new since
the previous call, with terminal control sequences removed for the model
(:class:`~zuno.execution.terminal_text.TerminalText`: colours, cursor moves
and titles are dropped; carriage returns and backspaces overwrite as on a
screen, so a progress bar shows its last state), bounded by ``tool_output``.
Unread output waiting for a call is held up to :data:`PENDING_CAP` bytes;
past that its middle is dropped, and the next call says how much.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from zuno.contract.output import CappedFile
from zuno.durability import fencing
from zuno.execution.input_wait import reading_input, unread_bytes
from zuno.execution.process import kill_process_tree, signal_label
from zuno.execution.sandbox.policy import Sandbox, SandboxPolicy, prepared_launch
from zuno.execution.terminal_text import TerminalText

if TYPE_CHECKING:
    from zuno.config.egress import EgressRules
    from zuno.execution.sandbox.egress.ledger import EgressRecord
    from zuno.execution.sandbox.egress.proxy import CallProxy

__all__ = [
    "PENDING_CAP",
    "InteractiveProcess",
    "Launched",
    "ProcessState",
    "Settled",
]

PENDING_CAP = 1024 * 1024
"""Unread output held for the next call; past it the middle is dropped."""

TICK = 0.05
"""Seconds between looks at a process while a call waits on it."""

_LOOKS = 3
"""Looks in a row, a tick apart and with no output between, that must see it waiting:
what a terminal program printed reaches us a moment after it was written (the
kernel hands it on from a work queue), so one look could beat its last prompt."""

_SETTLE_AFTER_WRITE = 0.25
"""Seconds after typing before a still-blocked reader counts as waiting without output."""

_ROWS, _COLS = 24, 120
_CHUNK = 64 * 1024
_DRAIN_GRACE = 1.0

# Inside the sandbox: take the terminal as the controlling one, then become the command.
# A session leader already (bwrap --new-session, or start_new_session outside a
# sandbox), setsid fails and is not needed.
_SANDBOX_PYTHON = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
"""The interpreter that runs the launcher inside the sandbox: the installed one, not a
virtual environment's link to it (a venv under a private folder such as /tmp is not
mounted in a bubblewrap sandbox; the system's interpreter is). The launcher needs
only the standard library (``-I -S``)."""

_LAUNCHER = (
    "import fcntl,os,sys,termios\n"
    "try:\n os.setsid()\nexcept OSError:\n pass\n"
    "fcntl.ioctl(0,termios.TIOCSCTTY,0)\n"
    "try:\n os.execvp(sys.argv[1],sys.argv[1:])\n"
    "except OSError as e:\n print(f'zuno: cannot execute {sys.argv[1]}: {e}',file=sys.stderr)\n"
    " sys.exit(127)\n"
)


class ProcessState(StrEnum):
    """Where an interactive process is in its life."""

    RUNNING = "running"
    EXITED = "exited"
    """It ended by itself (an exit code, or a signal it got from inside)."""
    KILLED = "killed"
    """``exec_kill`` or the end of the runtime killed it."""
    TIMED_OUT = "timed_out"
    """Its deadline passed and it was killed."""
    LOST = "lost"
    """The Zuno process running it is gone; how it ended is unknown."""


class Settled(StrEnum):
    """Why a call stopped waiting on a process."""

    ENDED = "ended"
    WAITING = "waiting_for_input"
    YIELD = "yield"
    """``yield_ms`` passed while it was still running."""


# One process -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Launched:
    """What :meth:`~zuno.execution.process_table.ProcessTable.start` needs to run one command."""

    argv: Sequence[str]
    command: str
    cwd: Path
    env: Mapping[str, str]
    sandbox: Sandbox
    policy: SandboxPolicy
    tty: bool
    time_limit: float
    transcript: Path
    transcript_cap: int | None
    egress: EgressRules | None = None
    """The rules of its proxy, in ``proxy`` network mode (else None: no proxy)."""


class InteractiveProcess:
    """One running command, its input, its unread output and how it ended."""

    def __init__(self, session_id: str, number: int, call_id: str, spec: Launched) -> None:
        self.session_id = session_id
        self.number = number
        self.call_id = call_id
        self.command = spec.command
        self.tty = spec.tty
        self.sandbox = spec.sandbox.name
        self.time_limit = spec.time_limit
        self.transcript = spec.transcript
        self.started = time.monotonic()
        self._deadline = self.started + spec.time_limit
        self._stack = ExitStack()
        self._lock = threading.Lock()
        self._pending = bytearray()
        self._dropped = 0
        self.total_bytes = 0
        """Output bytes received so far."""
        self._text = TerminalText()
        self._ended = threading.Event()
        self._stop = threading.Event()
        self._reaping = threading.Lock()
        """Held while the tree is killed and the root reaped: a kill from a call never
        signals a process id that was reaped, and so could be another's by now."""
        self._reaped = False
        self.state = ProcessState.RUNNING
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.kill_reason: str | None = None
        self.recorded_end = False
        """Whether the end row was written (by the table, on the event loop's thread)."""
        self._wrote_at: float | None = None
        self._bytes_at_write = 0
        self.egress: CallProxy | None = None
        """Its proxy in ``proxy`` network mode: serves it for as long as it lives."""
        self._egress_taken = 0
        try:
            self._spawn(spec)
        except BaseException:
            self._stack.close()
            raise
        self._reader = threading.Thread(
            target=self._read_loop, name=f"zuno-exec-{number}", daemon=True
        )
        self._reader.start()

    # Starting ---------------------------------------------------------------------

    def _spawn(self, spec: Launched) -> None:
        spec.transcript.parent.mkdir(parents=True, exist_ok=True)
        self._sink = CappedFile(spec.transcript, spec.transcript_cap, live=True)
        self._stack.callback(self._sink.close, "transcript")
        argv = list(spec.argv)
        if spec.tty:
            argv = [_SANDBOX_PYTHON, "-I", "-S", "-c", _LAUNCHER, *argv]
        policy = spec.policy
        if spec.egress is not None:
            from zuno.execution.sandbox.egress.proxy import hosted_proxy

            # The process outlives its call: its proxy runs on a loop of its own.
            self.egress = self._stack.enter_context(hosted_proxy(spec.egress))
            policy = replace(policy, egress_fd=self.egress.child_fd)
        launch = self._stack.enter_context(
            prepared_launch(spec.sandbox, argv, policy, cwd=spec.cwd, env=spec.env)
        )
        env = dict(launch.env)
        if spec.tty:
            if env.get("TERM", "dumb") in ("", "dumb"):
                env["TERM"] = "xterm"  # what a terminal program expects; sequences are stripped
            env.update(COLUMNS=str(_COLS), LINES=str(_ROWS))
            master, slave = os.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", _ROWS, _COLS, 0, 0))
            ends = (slave, slave, slave)
            self._input_fd, self._output_fd = master, master
            self._closing = [slave]
        else:
            stdin_read, stdin_write = os.pipe()
            out_read, out_write = os.pipe()
            ends = (stdin_read, out_write, out_write)
            self._input_fd, self._output_fd = stdin_write, out_read
            self._closing = [stdin_read, out_write]
        st = os.fstat(ends[0])
        self.input_id = (st.st_dev, st.st_ino)
        self._slave_path = os.ttyname(ends[0]) if spec.tty else None
        # Every sandbox's launch dies with this process, even on SIGKILL: bubblewrap's
        # --die-with-parent, the Landlock helper's and the none guard's parent-death signal.
        argv = launch.argv
        try:
            self.popen = subprocess.Popen(
                argv,
                stdin=ends[0],
                stdout=ends[1],
                stderr=ends[2],
                cwd=launch.cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
                pass_fds=launch.pass_fds,
            )
        except BaseException:
            for fd in {*self._closing, self._input_fd, self._output_fd}:
                os.close(fd)
            raise
        for fd in self._closing:
            os.close(fd)
        os.set_blocking(self._input_fd, False)
        self.pid = self.popen.pid
        fencing.register_group(self.pid)  # killed if this worker's lease lapses

    # The reader thread --------------------------------------------------------------

    def _read_loop(self) -> None:
        """Read output until the process ends, enforcing its deadline; then reap it."""
        waiter = select.poll()
        waiter.register(self._output_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        ending: ProcessState | None = None
        try:
            while True:
                if ending is None and self._stop.is_set():
                    ending = ProcessState.KILLED
                if ending is None and time.monotonic() >= self._deadline:
                    ending = ProcessState.TIMED_OUT
                if ending is not None or self._exited():
                    break
                if waiter.poll(TICK * 1000) and not self._read_once():
                    # End of output: the process closed it; wait for its exit.
                    self._wait_exit()
                    break
            if ending is None and self._stop.is_set():
                ending = ProcessState.KILLED  # set before the kill: the end seen is the kill's
            with self._reaping:
                kill_process_tree(self.pid)
                self._reap()
                self._reaped = True
            fencing.forget_group(self.pid)
            self._drain()
            if ending is not None and self.state is ProcessState.RUNNING:
                self.state = ending
            elif self.state is ProcessState.RUNNING:
                self.state = ProcessState.EXITED
        finally:
            self._ended.set()

    def _exited(self) -> bool:
        """Whether the root ended (not reaped yet, so its group stays known for the kill)."""
        try:
            found = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return found is not None and found.si_pid != 0

    def _wait_exit(self) -> None:
        while not self._exited() and not self._stop.is_set():
            if time.monotonic() >= self._deadline:
                self.state = ProcessState.TIMED_OUT
                return
            time.sleep(TICK)

    def _reap(self) -> None:
        code = self.popen.wait()
        if code < 0:
            self.signal = -code
        else:
            self.exit_code = code

    def _read_once(self) -> bool:
        """Take what output is there; False at end of output."""
        try:
            data = os.read(self._output_fd, _CHUNK)
        except BlockingIOError:
            return True
        except OSError:  # EIO: every holder of the terminal's slave side is gone
            return False
        if not data:
            return False
        self._take_in(data)
        return True

    def _drain(self) -> None:
        """After the kill, read what is left until end of output (bounded by a grace)."""
        os.set_blocking(self._output_fd, False)
        waiter = select.poll()
        waiter.register(self._output_fd, select.POLLIN | select.POLLHUP)
        until = time.monotonic() + _DRAIN_GRACE
        while time.monotonic() < until:
            if not waiter.poll(TICK * 1000):
                continue
            if not self._read_once():
                return

    def _take_in(self, data: bytes) -> None:
        self._sink.write(data)
        with self._lock:
            self.total_bytes += len(data)
            self._pending += data
            if len(self._pending) > PENDING_CAP:
                # Keep the first and the last half: the model sees both ends.
                half = PENDING_CAP // 2
                cut = len(self._pending) - PENDING_CAP
                del self._pending[half : half + cut]
                self._dropped += cut

    # What calls use ---------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        """Whether the process ended and its output was read to the end."""
        return self._ended.is_set()

    def take(self) -> tuple[str, int]:
        """The model text of the output not yet taken, and how many bytes were dropped."""
        with self._lock:
            data, dropped = bytes(self._pending), self._dropped
            self._pending.clear()
            self._dropped = 0
        text = self._text.feed(data, final=self.ended and not self.unread)
        return text, dropped

    @property
    def unread(self) -> bool:
        """Whether output is waiting for the next :meth:`take`."""
        with self._lock:
            return bool(self._pending)

    async def write(self, data: bytes, limit_s: float) -> int:
        """Type data; returns how many bytes the process took within ``limit_s`` seconds."""
        until = time.monotonic() + limit_s
        self._wrote_at = time.monotonic()
        self._bytes_at_write = self.total_bytes
        sent = 0
        while sent < len(data) and not self.ended:
            try:
                sent += os.write(self._input_fd, data[sent : sent + 4096])
                continue
            except BlockingIOError:
                pass
            except OSError:
                break
            if time.monotonic() >= until:
                break
            await anyio.sleep(TICK)
        return sent

    def waiting_for_input(self) -> bool:
        """Whether the process sleeps reading its input with nothing left to read."""
        if self.ended:
            return False
        if unread_bytes(self._output_fd):
            return False  # output the reader thread has not taken yet
        if self._input_pending():
            return False
        foreground: int | None = None
        if self.tty:
            with contextlib.suppress(OSError):
                foreground = os.tcgetpgrp(self._output_fd)
            if not foreground:
                return False  # the command has not taken its terminal yet
        return reading_input(self.pid, self.input_id, foreground)

    def _input_pending(self) -> bool:
        """Whether typed input still waits for the process to read it."""
        if not self.tty:
            return unread_bytes(self._input_fd) > 0
        if self._slave_path is None:
            return False
        try:
            fd = os.open(self._slave_path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            return unread_bytes(fd) > 0
        finally:
            os.close(fd)

    async def settle(self, yield_s: float) -> Settled:
        """Wait until the process ends, waits for input, or ``yield_s`` passes."""
        until = time.monotonic() + yield_s
        seen = self.total_bytes
        waiting = 0
        while True:
            if self.ended:
                await self._egress_closed()
                return Settled.ENDED
            if time.monotonic() >= until:
                return Settled.YIELD
            await anyio.sleep(min(TICK, max(0.0, until - time.monotonic())))
            if self.total_bytes != seen:
                seen, waiting = self.total_bytes, 0
                continue
            waiting = waiting + 1 if self.waiting_for_input() else 0
            if waiting >= _LOOKS and self._typed_settled():
                return Settled.WAITING

    def _typed_settled(self) -> bool:
        """After typing: the process answered, or enough time passed for it to take the text."""
        if self._wrote_at is None or self.total_bytes != self._bytes_at_write:
            return True
        return time.monotonic() - self._wrote_at >= _SETTLE_AFTER_WRITE

    def take_egress(self) -> list[EgressRecord]:
        """The egress records of connections that ended since the last take."""
        proxy = self.egress
        if proxy is None:
            return []
        done = proxy.finished[self._egress_taken :]
        self._egress_taken += len(done)
        return done

    async def _egress_closed(self) -> None:
        """After the end: wait (briefly) for the proxy's last connections to close, so
        that the final report holds them."""
        proxy = self.egress
        if proxy is None:
            return
        with anyio.move_on_after(_DRAIN_GRACE):
            while not proxy.idle:  # noqa: ASYNC110 - the proxy's own loop clears it
                await anyio.sleep(TICK / 5)

    def kill(self, why: str = "killed by exec_kill") -> None:
        """Kill the whole tree now (the reader thread reaps it and finishes).

        ``why`` is what the process's row says of its end, if this kill ends it.
        """
        if self.kill_reason is None:
            self.kill_reason = why
        self._stop.set()
        with self._reaping:
            if not self._reaped:
                kill_process_tree(self.pid)

    async def wait_ended(self, limit: float = 5.0) -> None:
        """Wait (bounded) for the reader thread to reap the process."""
        with anyio.move_on_after(limit):
            while not self.ended:  # noqa: ASYNC110 - a thread sets it, nothing awaitable
                await anyio.sleep(TICK)
        if self.ended:
            await self._egress_closed()

    def close(self) -> None:
        """Release the descriptors, the transcript and the sandbox's folders (after the end)."""
        self._reader.join(timeout=_DRAIN_GRACE + 1)
        for fd in {self._input_fd, self._output_fd}:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._stack.close()

    @property
    def signal_name(self) -> str | None:
        """The name of the signal that ended the process (``SIGKILL``), or None."""
        return signal_label(self.signal)

    @property
    def seconds(self) -> float:
        """Seconds since the process started."""
        return time.monotonic() - self.started
