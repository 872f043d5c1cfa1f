"""Kill a worker's commands at its fence deadline, whatever happens to the worker.

Run as a script (``python -I -S _fence_guard.py``) by :mod:`zuno.durability.fencing`;
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
forks away), then SIGKILLs it (``_kill_tree.py``, shared with the command
guard of ``sandbox/_guard.py``).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Callable

__all__ = ["main"]


_clock = [time.CLOCK_BOOTTIME]


def _now() -> float:
    return time.clock_gettime(_clock[0])


def _load_kill_tree() -> Callable[..., None]:
    """The shared stop-then-kill routine (``zuno/core/_kill_tree.py``; no Zuno import)."""
    import importlib.util

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(package, "core", "_kill_tree.py")
    spec = importlib.util.spec_from_file_location("_zuno_kill_tree", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kill_tree


def _kill(groups: set[int], kill_tree: Callable[..., None]) -> None:
    for root in groups:
        kill_tree(root, group=True)


def main() -> int:
    """Read orders on stdin until it ends; kill at the deadline and at the end.

    The first argument, when given, is the clock id deadlines are read on.
    """
    if len(sys.argv) > 1 and sys.argv[1].isdigit():
        _clock[0] = int(sys.argv[1])
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGTSTP):
        signal.signal(signum, signal.SIG_IGN)
    kill_tree = _load_kill_tree()
    groups: set[int] = set()
    deadline: float | None = None
    buffer = b""
    fd = sys.stdin.fileno()
    while True:
        wait = None if deadline is None else min(3600.0, max(0.0, deadline - _now()))
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            if deadline is not None and _now() < deadline:
                continue  # a long wait's cap (an hour), not the deadline
            _kill(groups, kill_tree)  # the deadline passed and was not pushed forward
            groups.clear()
            deadline = None
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            _kill(groups, kill_tree)
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
                _kill(groups, kill_tree)
                groups.clear()


if __name__ == "__main__":
    sys.exit(main())
