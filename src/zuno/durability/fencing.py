"""Self-fencing: a worker whose lease may lapse stops its own commands first.

A session belongs to a worker as long as the worker's lease (see
:mod:`zuno.durability.workers`) has not expired on the database's clock; then another
worker may take it over and settle its calls. A command must therefore never
run past its owner's lease. The timing, for a lease of ``L`` seconds:

- the lease is renewed every ``L / 3`` seconds;
- each renewal that succeeds sets the *fence deadline*: the moment the renewal
  was sent, plus ``L - M``, where the margin ``M`` is ``L / 6``
  (:func:`fence_margin`);
- at the fence deadline, unless a later renewal pushed it forward, the worker
  kills every command and interactive process it started (each one's process
  group and tree, and so its sandbox) and writes nothing more to its sessions
  (:meth:`~zuno.durability.store.sqlite.SQLiteStore.fence_sessions`) until it holds
  them again;
- the lease itself expires at the database's time of that renewal plus ``L``:
  at least ``M`` after the fence deadline. Only then does another worker take
  the session over and settle its calls.

Each lease fences its own commands: a runtime runs its calls inside
:func:`holding` its lease, so when one store's lease lapses the commands of
another store's runtime in the same process go on (a command started outside
any lease's hold is fenced by every lease alive, the safe side).

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
own at its start (:func:`command_deadline`): its timeout, and its lease's fence
deadline through a pipe written at every renewal. The guard that runs with
the command (``sandbox/_guard.py``, inside its sandbox) keeps it alone, so
the command dies on time even when the worker and its fence guard are both
frozen.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Generator
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
    "holding",
    "register_group",
]

_log = logging.getLogger("zuno.durability.fencing")

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


class _Clock:
    """The process's choice of fence clock (see :func:`choose_clock`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.chosen = False
        self.clock_id = time.CLOCK_BOOTTIME


_state = _Clock()


class _Fence:
    """One lease's commands, its deadline and its guard process."""

    def __init__(self) -> None:
        self.groups: set[int] = set()
        self.deadline: float | None = None
        self.guard: Popen[bytes] | None = None
        self.guard_pid = 0
        self.pipes: set[int] = set()
        """The write ends of its commands' fence pipes (see :func:`command_deadline`)."""

    def live_deadline(self) -> float | None:
        """The deadline, unless it already passed (a lease fenced for good kills no more)."""
        if self.deadline is None or self.deadline <= fence_clock():
            return None
        return self.deadline

    def tell_commands(self) -> None:
        """Write the deadline to every command guard of this lease (never blocking)."""
        _tell(self.pipes, self.live_deadline())

    def send(self, line: str) -> None:
        """Tell the guard (started when there is a deadline and a command to guard)."""
        guard = self.guard
        if guard is None or guard.poll() is not None or self.guard_pid != os.getpid():
            deadline = self.live_deadline()  # a deadline long past was enforced already
            if deadline is None or not self.groups:
                return
            guard = self._start_guard()
            if guard is None:
                return
            line = "".join(f"add {g}\n" for g in self.groups) + f"until {deadline}\n"
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
                [sys.executable, "-I", "-S", str(_GUARD), str(_state.clock_id)],
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

    def close(self) -> None:
        """The lease ended on purpose: its guard lets go of every group and ends, killing none."""
        guard, self.guard = self.guard, None
        if guard is None or guard.poll() is not None or self.guard_pid != os.getpid():
            return
        orders = "".join(f"forget {g}\n" for g in self.groups) + "until 1e12\n"
        with contextlib.suppress(OSError):
            assert guard.stdin is not None
            guard.stdin.write(orders.encode())
            guard.stdin.close()  # end of input with nothing registered: the guard just ends


_lock = threading.Lock()
_fences: dict[int, _Fence] = {}
"""The fences of the leases alive in this process, by holder (see :func:`holding`)."""
_unheld: set[int] = set()
"""Groups started while no lease was alive: the next lease adopts them."""
_owners: dict[int, list[int]] = {}
"""Each group's holders, so it is forgotten where it was registered."""
_unheld_pipes: set[int] = set()
"""Fence pipes of commands started outside any lease's hold: told the earliest live deadline."""
_holder: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "zuno_fence_holder", default=None
)


@contextlib.contextmanager
def holding(holder: int | None) -> Generator[None]:
    """Commands started inside belong to the lease ``holder`` (a :attr:`Watchdog.holder`).

    A runtime runs its calls inside, so a lease that lapses kills its own
    commands and not those of another store's runtime in the same process. A
    command started outside any ``holding`` belongs to every lease alive (it
    is fenced by the first to lapse: the safe side).
    """
    token = _holder.set(holder)
    try:
        yield
    finally:
        _holder.reset(token)


def register_group(pgid: int) -> None:
    """A command or interactive process now runs as process group ``pgid``: fence it."""
    holder = _holder.get()
    with _lock:
        held = holder in _fences
        owners = [holder] if held else list(_fences)
        if not owners:
            _unheld.add(pgid)
        _owners[pgid] = owners
        for owner in owners:
            fence = _fences[owner]
            fence.groups.add(pgid)
            fence.send(f"add {pgid}")
        # A command of a lease past its fence deadline must not run; one started outside
        # any lease is not killed for another lease that fenced for good long ago.
        lapsed = held and _fences[owners[0]].live_deadline() is None
    if lapsed:  # a lease past its fence deadline starts nothing that runs
        from zuno.core.process_tree import kill_process_tree

        kill_process_tree(pgid)
        _log.warning("zuno: killed a command started after its worker lease lapsed")


def forget_group(pgid: int) -> None:
    """The group ``pgid`` has ended (and was reaped)."""
    with _lock:
        _unheld.discard(pgid)
        for owner in _owners.pop(pgid, []):
            fence = _fences.get(owner)
            if fence is not None:
                fence.groups.discard(pgid)
                if fence.guard is not None:
                    fence.send(f"forget {pgid}")


def _renewed(holder: int, deadline: float | None) -> None:
    """Lease ``holder``'s fence deadline is now ``deadline``; None: the lease ended on purpose."""
    with _lock:
        fence = _fences.get(holder)
        if deadline is None:
            if fence is not None:
                del _fences[holder]
                fence.close()
                _tell(fence.pipes, None)  # ended on purpose: its commands' guards keep their own
                for pgid in fence.groups:
                    if holder in (owners := _owners.get(pgid, [])):
                        owners.remove(holder)
            return
        if fence is None:
            fence = _fences[holder] = _Fence()
            fence.groups |= _unheld
            for pgid in _unheld:
                _owners.setdefault(pgid, []).append(holder)
            _unheld.clear()
        fence.deadline = deadline
        fence.tell_commands()
        _tell(_unheld_pipes, _earliest_live())
        if fence.guard is not None or fence.groups:
            fence.send(f"until {deadline}")


def _earliest_live() -> float | None:
    return min((d for f in _fences.values() if (d := f.live_deadline()) is not None), default=None)


def _tell(pipes: set[int], deadline: float | None) -> None:
    line = f"until {deadline if deadline is not None else 1e12}\n".encode()
    for fd in pipes:
        # Its guard is gone, or so far behind that its pipe is full: nothing to do.
        with contextlib.suppress(OSError):
            os.write(fd, line)


def _fire_holder(holder: int | None, reason: str) -> int:
    """Kill the commands of lease ``holder`` (None: of every lease, and those of none)."""
    from zuno.core.process_tree import kill_process_tree

    groups: set[int] = set()
    with _lock:
        if holder is None:
            fences = list(_fences.values())
            groups |= _unheld
        else:
            fences = [_fences[holder]] if holder in _fences else []
        for fence in fences:
            groups |= fence.groups
            if fence.guard is not None:
                fence.send("kill 0")
    for pgid in groups:
        kill_process_tree(pgid)
    if groups:
        _log.warning("zuno: killed %d command(s): %s", len(groups), reason)
    return len(groups)


def fire(reason: str) -> int:
    """Kill every command this process started, now; returns how many groups were killed."""
    return _fire_holder(None, reason)


GRACE = 2.0
"""Seconds a command's guard waits past its timeout: the worker ends it first, and says so."""


@contextlib.contextmanager
def command_deadline(time_limit: float | None) -> Generator[tuple[list[str], int]]:
    """A command's hard deadline, for the guard that runs with it (``sandbox/_guard.py``).

    Yields the guard's options and the descriptor the command's process must
    inherit (the read end of its fence pipe). The deadline is the earlier of
    the command's own (``time_limit`` plus :data:`GRACE`, from now) and the
    fence deadline of the lease it runs under (see :func:`holding`), which the
    pipe carries now and after every renewal; the guard enforces it alone, on
    the fence's clock (:func:`fence_clock`), so it holds when this process is
    paused or gone.
    """
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    options = ["--clock", str(_state.clock_id), "--fence", str(read_end)]
    if time_limit is not None:
        options += ["--until", repr(fence_clock() + time_limit + GRACE)]
    holder = _holder.get()
    with _lock:
        fence = _fences.get(holder) if holder is not None else None
        pipes = fence.pipes if fence is not None else _unheld_pipes
        pipes.add(write_end)
        now = fence.live_deadline() if fence is not None else _earliest_live()
        if now is not None:
            _tell({write_end}, now)
    try:
        yield options, read_end
    finally:
        with _lock:
            pipes.discard(write_end)
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

    @property
    def holder(self) -> int:
        """This lease's key for :func:`holding`."""
        return id(self)

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
            _fire_holder(id(self), reason)
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
