"""Self-fencing: a worker whose lease may lapse stops its own commands first.

A session belongs to a worker as long as the worker's lease (see
:mod:`zuno.workers`) has not expired on the database's clock; then another
worker may take it over and settle its calls. A command must therefore never
run past its owner's lease. The timing, for a lease of ``L`` seconds:

- the lease is renewed every ``L / 3`` seconds;
- each renewal that succeeds sets the *fence deadline*: the moment the renewal
  was sent, plus ``L - M``, where the margin ``M`` is ``L / 6``
  (:func:`fence_margin`);
- at the fence deadline, unless a later renewal pushed it forward, the worker
  kills every command and interactive process it started (each one's process
  group and tree, and so its sandbox) and writes nothing more to its sessions
  (:meth:`~zuno.store.sqlite.SQLiteStore.fence_sessions`) until it holds
  them again;
- the lease itself expires at the database's time of that renewal plus ``L``:
  at least ``M`` after the fence deadline. Only then does another worker take
  the session over and settle its calls.

Two enforcers keep the deadline. A thread of the worker (:class:`Watchdog`),
which also stops the writes; and a guard process of its own
(``_fence_guard.py``, started with the first command), told every deadline
and every command's process group: it kills them at the deadline even when
the worker is paused (SIGSTOP), starved, or stuck on a dead connection, and
when the worker dies. The one case neither covers is a whole machine frozen
(every process stopped, the commands too): nothing runs there, and when it
thaws the guard's deadline has passed (its clock, ``CLOCK_BOOTTIME``, counts
the frozen time; see :func:`choose_clock`), so it kills at once; what a command does in the instant
between its own thaw and the guard's is the remaining exposure.

With a store machines share, each command also gets a hard deadline of its
own at its start (:func:`command_deadline`): its timeout, and the fence
deadline through a pipe written at every renewal. The guard that runs with
the command (``sandbox/_guard.py``, inside its sandbox) keeps it alone, so
the command dies on time even when the worker and its fence guard are both
frozen.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from subprocess import Popen

__all__ = [
    "GRACE",
    "Watchdog",
    "across_hosts",
    "choose_clock",
    "command_deadline",
    "fence_clock",
    "fence_margin",
    "fire",
    "forget_group",
    "register_group",
]

_log = logging.getLogger("zuno.fencing")

_GUARD = Path(__file__).with_name("_fence_guard.py")


def choose_clock(single_host: bool) -> None:
    """Which clock measures the fence: ``CLOCK_BOOTTIME``, or ``CLOCK_MONOTONIC`` on one machine.

    With workers on many machines, time a machine spends suspended counts: the
    others went on, and may take over. With a store on one machine (SQLite)
    every worker was suspended too, so a laptop waking up does not fence itself
    for the time it slept. The first lease of a process decides.
    """
    with _state.lock:
        if not _state.chosen:
            _state.chosen = True
            _state.clock_id = time.CLOCK_MONOTONIC if single_host else time.CLOCK_BOOTTIME


def across_hosts() -> bool:
    """Whether this process's leases are in a store shared by machines (PostgreSQL).

    Only then can a worker on another machine take a session over while this
    one is paused, and a command's sandbox needs a deadline guard of its own.
    """
    with _state.lock:
        return _state.chosen and _state.clock_id == time.CLOCK_BOOTTIME


def fence_clock() -> float:
    """Seconds on the fence's clock (see :func:`choose_clock`)."""
    return time.clock_gettime(_state.clock_id)


def fence_margin(lease_seconds: float) -> float:
    """How long before its lease can expire a worker fences itself: a sixth of the lease."""
    return lease_seconds / 6


class _State:
    """The process's commands and its guard (one per process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.groups: set[int] = set()
        self.deadline: float | None = None
        """The earliest fence deadline of the leases alive in this process."""
        self.deadlines: dict[int, float] = {}
        self.guard: Popen[bytes] | None = None
        self.guard_pid = 0
        self.owner_pid = os.getpid()
        self.chosen = False
        self.clock_id = time.CLOCK_BOOTTIME
        self.pipes: set[int] = set()
        """The write ends of the running commands' fence pipes (see :func:`command_deadline`)."""

    def tell_commands(self) -> None:
        """Write the current fence deadline to every command's guard (never blocking)."""
        line = f"until {self.deadline if self.deadline is not None else 1e12}\n".encode()
        for fd in self.pipes:
            # Its guard is gone, or so far behind that its pipe is full: nothing to do.
            with suppress(OSError):
                os.write(fd, line)

    def send(self, line: str) -> None:
        """Tell the guard (started when there is a deadline and a command to guard)."""
        guard = self.guard
        if guard is None or guard.poll() is not None or self.guard_pid != os.getpid():
            if self.deadline is None or not self.groups:
                return
            guard = self._start_guard()
            if guard is None:
                return
            line = "".join(f"add {g}\n" for g in self.groups) + f"until {self.deadline}\n"
        assert guard.stdin is not None
        try:
            guard.stdin.write(line.encode() if line.endswith("\n") else (line + "\n").encode())
            guard.stdin.flush()
        except OSError as exc:
            _log.warning("zuno: the fence guard stopped (%s); this process still fences", exc)
            self.guard = None

    def _start_guard(self) -> Popen[bytes] | None:
        import subprocess

        try:
            guard = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_GUARD), str(self.clock_id)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            _log.warning("zuno: the fence guard could not start (%s)", exc)
            return None
        self.guard, self.guard_pid = guard, os.getpid()
        return guard


_state = _State()


def register_group(pgid: int) -> None:
    """A command or interactive process now runs as process group ``pgid``: fence it."""
    with _state.lock:
        _state.groups.add(pgid)
        _state.send(f"add {pgid}")


def forget_group(pgid: int) -> None:
    """The group ``pgid`` has ended (and was reaped)."""
    with _state.lock:
        _state.groups.discard(pgid)
        if _state.guard is not None:
            _state.send(f"forget {pgid}")


def _renewed(holder: int, deadline: float | None) -> None:
    """Lease ``holder``'s fence deadline is now ``deadline`` (None: it ended on purpose).

    Commands are killed at the earliest deadline of the leases still held: a
    lease that ended stops counting, and one lease ending does not lift another's.
    """
    with _state.lock:
        if deadline is None:
            _state.deadlines.pop(holder, None)
        else:
            _state.deadlines[holder] = deadline
        # A deadline already past is a lease that fenced and was never renewed (its
        # store unreachable for good): its kill happened; it must not kill again every
        # command this process starts later, nor at every renewal of another lease.
        now = time.clock_gettime(_state.clock_id)
        deadline = min((d for d in _state.deadlines.values() if d > now), default=None)
        _state.deadline = deadline
        _state.tell_commands()
        if _state.guard is not None or (deadline is not None and _state.groups):
            _state.send(f"until {deadline if deadline is not None else 1e12}")


def fire(reason: str) -> int:
    """Kill every command this process started, now; returns how many groups were killed."""
    from zuno.process import kill_process_tree

    with _state.lock:
        groups = set(_state.groups)
        if _state.guard is not None:
            _state.send("kill 0")
    for pgid in groups:
        kill_process_tree(pgid)
    if groups:
        _log.warning("zuno: killed %d command(s): %s", len(groups), reason)
    return len(groups)


GRACE = 2.0
"""Seconds a command's guard waits past its timeout: the worker ends it first, and says so."""


@contextmanager
def command_deadline(time_limit: float | None) -> Generator[tuple[list[str], int]]:
    """A command's hard deadline, for the guard that runs with it (``sandbox/_guard.py``).

    Yields the guard's options and the descriptor the command's process must
    inherit (the read end of its fence pipe). The deadline is the earlier of
    the command's own (``time_limit`` plus :data:`GRACE`, from now) and this
    process's fence deadline, which the pipe carries, now and after every
    renewal of the lease; the guard enforces it alone, on the fence's clock
    (:func:`fence_clock`), so it holds when this process is paused or gone.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    options = ["--clock", str(_state.clock_id), "--fence", str(read_end)]
    if time_limit is not None:
        options += ["--until", repr(fence_clock() + time_limit + GRACE)]
    with _state.lock:
        _state.pipes.add(write_end)
        if _state.deadline is not None and _state.deadline > fence_clock():
            with suppress(OSError):
                os.write(write_end, f"until {_state.deadline}\n".encode())
    try:
        yield options, read_end
    finally:
        with _state.lock:
            _state.pipes.discard(write_end)
        os.close(write_end)
        os.close(read_end)


class Watchdog:
    """Fences this process when its lease was not renewed by the fence deadline.

    Args:
        lease_seconds: The lease's length.
        on_fence: Called (from the watchdog's thread) with the reason, after the
            commands were killed: stops the writes of the lease's store.
    """

    def __init__(self, lease_seconds: float, on_fence: Callable[[str], None]) -> None:
        self.lease_seconds = lease_seconds
        self.margin = fence_margin(lease_seconds)
        self._on_fence = on_fence
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._stopped = False
        self.fenced = False
        """Whether the last deadline passed without a renewal (until the next renewal)."""
        self._thread = threading.Thread(target=self._run, name="zuno-fence", daemon=True)
        self._thread.start()

    def renewed(self, sent_at: float) -> bool:
        """A renewal sent at ``sent_at`` (:func:`fence_clock`) succeeded: push the deadline.

        Returns whether this ends a fence. A renewal whose answer came too late
        (its deadline already passed) changes nothing.
        """
        deadline = sent_at + self.lease_seconds - self.margin
        if deadline <= fence_clock():
            return False
        with self._cond:
            ended = self.fenced
            self._deadline = deadline
            self.fenced = False
            self._cond.notify_all()
        _renewed(id(self), deadline)
        return ended

    def check(self) -> None:
        """Fence now, in the caller's thread, if the deadline passed (the thread may lag).

        A writer calls it before writing: a process that was paused past its
        deadline and continues may not write before its watchdog has woken.
        """
        with self._cond:
            if self._stopped or self.fenced or self._deadline is None:
                return
            if self._deadline - fence_clock() > 0:
                return
            self.fenced = True
        self._fire()

    def _fire(self) -> None:
        reason = (
            f"the worker lease was not renewed for {self.lease_seconds - self.margin:g} s "
            f"(lease {self.lease_seconds:g} s): this worker stopped its commands and "
            "writes nothing more to its sessions"
        )
        try:
            fire(reason)
            self._on_fence(reason)
        except Exception as exc:  # the fence must not end the thread
            _log.warning("zuno: fencing failed: %s", exc)

    def stop(self) -> None:
        """The lease ended on purpose (expired by its worker): nothing more to enforce."""
        with self._cond:
            self._stopped = True
            self._deadline = None
            self._cond.notify_all()
        _renewed(id(self), None)

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if self._deadline is None or self.fenced:
                    self._cond.wait()
                    continue
                left = self._deadline - fence_clock()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self.fenced = True
                self._cond.release()
                try:
                    self._fire()
                finally:
                    self._cond.acquire()
