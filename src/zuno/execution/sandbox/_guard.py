"""Keep a command, and all it started, from outliving its call, its deadline or Zuno.

Run as a script (``python -I -S _guard.py ZUNO_PID [OPTIONS] -- COMMAND...``);
standard library only. The ``none`` sandbox runs every command under it, beside
the command. Bubblewrap (``--die-with-parent``) and the Landlock helper run a
command as the child of a PID namespace's init that dies with Zuno and exits
when the command does, so the kernel ends everything in it; there the guard
runs *inside* the sandbox, as the command's parent, for its deadline (with
``ZUNO_PID`` 0: the sandbox's init already dies with Zuno). Without a sandbox
there is no namespace; this guard stands in for its init:

* it becomes a child subreaper, so a process of the command that leaves its
  session and is orphaned (``setsid``, ``nohup``, ``setsid -f``, a double
  fork) is re-parented to the guard, not to init, and stays findable;
* it forks the command and reaps what is re-parented to it; when the command
  ends, it kills every process still below it (so ``sleep 25 & echo hi`` ends
  with ``echo``: nothing is left to hold the output pipes or to run on after
  the call), and ends the way the command ended (its exit status, or its
  signal);
* it asks the kernel for a signal when Zuno dies (``PR_SET_PDEATHSIG``), even
  by SIGKILL, and then kills every process below it too.

A cancellation, and the call's own timeout, reach the guard's tree from
outside (:func:`zuno.execution.process.kill_process_tree`, which finds the re-parented
orphans among the guard's descendants). The hard deadline is the guard's own,
so that it holds when nothing outside runs any more (the worker paused or
starved, its fence guard too): the options name it, on the clock of
``--clock`` (``CLOCK_BOOTTIME`` unless told otherwise):

``--until T``
    The command's own deadline (its timeout, plus a grace for the worker to
    end it first and report it).
``--fence FD``
    A pipe from the worker. Each line ``until T`` is the worker's fence
    deadline (see :mod:`zuno.durability.fencing`), pushed forward at every renewal of
    its lease; end of input (the worker is gone) kills at once.

At the earlier of the two, the guard kills every process below it (stopped
first, then SIGKILLed, by ``_kill_tree.py``, the routine the fence guard uses
too), and ends the way the command then ends (SIGKILL).

Signals meant for the command's process group reach the command directly; the
guard itself ignores them, and the command gets default dispositions.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Sequence

__all__ = ["main"]

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_ZUNO_DIED = signal.SIGRTMAX - 1  # a signal nothing else sends to the guard
_IGNORED = (
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGHUP,
    signal.SIGTERM,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_DEFAULT_IN_COMMAND = (*_IGNORED, signal.SIGPIPE, signal.SIGXFSZ, _ZUNO_DIED)

_libc = ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    if _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(value), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}): {os.strerror(errno)}")


def _load_kill_tree() -> Callable[..., None]:
    """The shared stop-then-kill routine (``zuno/core/_kill_tree.py``; no Zuno import)."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    package = os.path.dirname(os.path.dirname(here))
    path = os.path.join(package, "core", "_kill_tree.py")
    spec = importlib.util.spec_from_file_location("_zuno_kill_tree", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kill_tree


_kill_tree = _load_kill_tree()


def _kill_everything_below() -> None:
    """Stop, then kill, every process below the guard."""
    _kill_tree(os.getpid(), group=False)


def _has_children() -> bool:
    """Whether any process is still a child of the guard (running or not yet reaped)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def _zuno_died(_signum: int, _frame: object) -> None:
    _kill_everything_below()
    os._exit(137)


def _become_command(command: list[str]) -> None:
    for signum in _DEFAULT_IN_COMMAND:
        signal.signal(signum, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"zuno: cannot execute {command[0]}: {exc.strerror}", file=sys.stderr)
        os._exit(127)


class _Deadline:
    """The command's own deadline and the worker's fence deadline, on one clock."""

    def __init__(self) -> None:
        self.clock = time.CLOCK_BOOTTIME
        self.until: float | None = None
        self.fence: float | None = None
        self.fence_fd: int | None = None
        self._buffer = b""

    def parse(self, options: list[str]) -> bool:
        """Read ``--clock``, ``--until`` and ``--fence``; False on anything else."""
        pairs = iter(options)
        for name in pairs:
            value = next(pairs, None)
            if value is None:
                return False
            try:
                if name == "--clock":
                    self.clock = int(value)
                elif name == "--until":
                    self.until = float(value)
                elif name == "--fence":
                    self.fence_fd = int(value)
                    os.set_inheritable(self.fence_fd, False)  # not the command's
                else:
                    return False
            except (ValueError, OSError):
                return False
        return True

    def left(self) -> float | None:
        """Seconds until the earlier deadline (None: none)."""
        ends = [t for t in (self.until, self.fence) if t is not None]
        return None if not ends else max(0.0, min(ends) - time.clock_gettime(self.clock))

    def read_fence(self) -> bool:
        """Take the worker's lines; False when it is gone (end of input)."""
        assert self.fence_fd is not None
        try:
            chunk = os.read(self.fence_fd, 4096)
        except BlockingIOError:
            return True
        except OSError:
            chunk = b""
        if not chunk:
            os.close(self.fence_fd)
            self.fence_fd = None
            return False
        *lines, self._buffer = (self._buffer + chunk).split(b"\n")
        for line in lines:
            word, _, value = line.decode("ascii", "replace").partition(" ")
            if word == "until":
                try:
                    self.fence = float(value)
                except ValueError:
                    continue
        return True


def _wait_for(child: int, deadline: _Deadline, wake: int) -> int:
    """Reap until ``child`` ends (killing the tree at the deadline); its wait status."""
    killed = False
    while True:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return 125 << 8
            if pid == 0:
                break
            if pid == child:
                return status
            # else: an orphan of the command, re-parented here
        left = None if killed else deadline.left()
        if left is not None:
            left = min(left, 3600.0)  # "no deadline" is a far one; select takes no more
        watched = [wake] if deadline.fence_fd is None else [wake, deadline.fence_fd]
        ready, _, _ = select.select(watched, [], [], left)
        if wake in ready:
            with contextlib.suppress(OSError):
                os.read(wake, 4096)
        gone = deadline.fence_fd in ready and not deadline.read_fence()
        if not killed and (gone or (not ready and deadline.left() == 0.0)):
            _kill_everything_below()  # its deadline, or the worker is gone
            killed = True


def main(argv: Sequence[str]) -> int:
    """``ZUNO_PID [OPTIONS] -- COMMAND...``: run COMMAND until it ends, its deadline, or Zuno's end.

    ``ZUNO_PID`` 0: no parent to watch (inside a sandbox, whose init dies with Zuno).
    """
    argv = list(argv)
    split = argv.index("--") if "--" in argv else -1
    deadline = _Deadline()
    if split < 1 or split + 1 >= len(argv) or not argv[0].isdigit():
        print("usage: _guard.py ZUNO_PID [OPTIONS] -- COMMAND...", file=sys.stderr)
        return 126
    if not deadline.parse(argv[1:split]):
        print(f"_guard.py: bad options {argv[1:split]}", file=sys.stderr)
        return 126
    parent, command = int(argv[0]), argv[split + 1 :]
    for signum in _IGNORED:
        signal.signal(signum, signal.SIG_IGN)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    if parent:
        signal.signal(_ZUNO_DIED, _zuno_died)
        _prctl(_PR_SET_PDEATHSIG, _ZUNO_DIED)
        if os.getppid() != parent:
            return 137  # Zuno died before the line above: as if killed with it
    # A child's end wakes the loop below (which also waits on the deadlines).
    wake, woken = os.pipe()
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(woken)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    child = os.fork()
    if child == 0:
        os.close(wake)
        os.close(woken)
        _become_command(command)
    status = _wait_for(child, deadline, wake)
    # The command is over: so is everything it left running. With no child
    # left there is no descendant either, and /proc need not be read.
    if _has_children():
        _kill_everything_below()
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP keep theirs
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
