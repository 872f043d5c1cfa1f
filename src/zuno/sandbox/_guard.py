"""Keep an unsandboxed command, and all it started, from outliving its call or Zuno.

Run as a script (``python -I -S _guard.py ZUNO_PID -- COMMAND...``) by the
``none`` sandbox; standard library only. Bubblewrap (``--die-with-parent``)
and the Landlock helper run a command as the child of a PID namespace's init
that dies with Zuno and exits when the command does, so the kernel ends
everything in it. Without a sandbox there is no namespace; this guard stands
in for its init:

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

A deadline or a cancellation reaches the guard's tree from outside
(:func:`zuno.process.kill_process_tree`, which finds the re-parented orphans
among the guard's descendants).

Signals meant for the command's process group reach the command directly; the
guard itself ignores them, and the command gets default dispositions.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Sequence

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


def _descendants(root: int) -> set[int]:
    """Every process below ``root``, from the parent links in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _kill_everything_below() -> None:
    """Stop, then kill, every process below the guard.

    Stopped first: a parent killed before its children would orphan them, and a
    member may fork while the others are being found.
    """
    me = os.getpid()
    stopped: set[int] = set()
    for _ in range(50):  # until none is left
        fresh = _descendants(me) - stopped
        if not fresh:
            break
        for pid in fresh:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= fresh
    for pid in stopped | _descendants(me):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


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


def main(argv: Sequence[str]) -> int:
    """``ZUNO_PID -- COMMAND...``: run COMMAND until it ends, or until Zuno dies."""
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: _guard.py ZUNO_PID -- COMMAND...", file=sys.stderr)
        return 126
    parent, command = int(argv[0]), list(argv[2:])
    for signum in _IGNORED:
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(_ZUNO_DIED, _zuno_died)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, _ZUNO_DIED)
    if os.getppid() != parent:
        return 137  # Zuno died before the line above: as if killed with it
    child = os.fork()
    if child == 0:
        _become_command(command)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 125
        if pid != child:
            continue  # an orphan of the command, re-parented here
        # The command is over: so is everything it left running. With no child
        # left there is no descendant either, and /proc need not be read.
        if _has_children():
            _kill_everything_below()
        if os.WIFSIGNALED(status):
            signum = os.WTERMSIG(status)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return 128 + signum
        return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
