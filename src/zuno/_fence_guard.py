"""Kill a worker's commands at its fence deadline, whatever happens to the worker.

Run as a script (``python -I -S _fence_guard.py``) by :mod:`zuno.fencing`;
standard library only. It is a process of its own, in a session of its own:
a worker that is paused (SIGSTOP), starved or stuck on a dead connection
cannot keep its commands alive past the deadline, because the guard, not the
worker, enforces it.

It reads lines on stdin, each one word and a number:

``until T``
    The deadline, on the clock named by the first argument (``CLOCK_BOOTTIME``
    unless told otherwise): at T every group still registered is killed.
``add PGID`` / ``forget PGID``
    A command's process group started / ended.
``kill 0``
    Kill every registered group now.

End of input (the worker exited or was killed) kills every group too, then
the guard ends. A kill stops each group's tree first (SIGSTOP, so no member
forks away), then SIGKILLs it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

__all__ = ["main"]


_clock = [time.CLOCK_BOOTTIME]


def _now() -> float:
    return time.clock_gettime(_clock[0])


def _tree(root: int) -> set[int]:
    """``root``'s group and every process below it, from /proc."""
    children: dict[int, list[int]] = {}
    group: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        if int(fields[2]) == root or int(fields[3]) == root:
            group.add(int(entry))
    found = set(group)
    pending = [root, *group]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _kill(groups: set[int]) -> None:
    for root in groups:
        with contextlib.suppress(OSError):
            os.killpg(root, signal.SIGSTOP)
        stopped: set[int] = set()
        for _ in range(20):
            fresh = _tree(root) - stopped
            if not fresh:
                break
            for pid in fresh:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGSTOP)
            stopped |= fresh
        with contextlib.suppress(OSError):
            os.killpg(root, signal.SIGKILL)
        for pid in stopped | _tree(root):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def main() -> int:
    """Read orders on stdin until it ends; kill at the deadline and at the end.

    The first argument, when given, is the clock id deadlines are read on.
    """
    if len(sys.argv) > 1 and sys.argv[1].isdigit():
        _clock[0] = int(sys.argv[1])
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGTSTP):
        signal.signal(signum, signal.SIG_IGN)
    groups: set[int] = set()
    deadline: float | None = None
    buffer = b""
    fd = sys.stdin.fileno()
    while True:
        wait = None if deadline is None else min(3600.0, max(0.0, deadline - _now()))
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            _kill(groups)  # the deadline passed and was not pushed forward
            groups.clear()
            deadline = None
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            _kill(groups)
            return 0
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            word, _, value = line.decode("ascii", "replace").partition(" ")
            try:
                number = float(value)
            except ValueError:
                continue
            if word == "until":
                deadline = number
            elif word == "add":
                groups.add(int(number))
            elif word == "forget":
                groups.discard(int(number))
            elif word == "kill":
                _kill(groups)
                groups.clear()


if __name__ == "__main__":
    sys.exit(main())
