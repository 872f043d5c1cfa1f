"""Stop, then kill, a tree of processes: the one routine of Zuno's guard scripts.

Standard library only, and no import of Zuno: the guards (``_fence_guard.py``,
``sandbox/_guard.py``) run as ``python -I -S`` scripts and load this file by
its path, inside a sandbox as well as beside it.

A tree is found from ``/proc`` (the parent links, and with ``group`` the
process group and session ids). It is frozen before it is killed: a parent
killed first would orphan its children, and a member may fork while the others
are being found. The calling process is never part of the tree.
"""

from __future__ import annotations

import contextlib
import os
import signal

__all__ = ["kill_tree", "members"]


def members(root: int, *, group: bool) -> set[int]:
    """Every process below ``root``; with ``group``, also those of its process group or session."""
    children: dict[int, list[int]] = {}
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        if group and root in (int(fields[2]), int(fields[3])):
            found.add(int(entry))
    pending = [root, *found]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    found.discard(os.getpid())
    return found


def _signal(pids: set[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


def kill_tree(root: int, *, group: bool, rounds: int = 50) -> None:
    """SIGSTOP the tree of ``root`` until no new member appears, then SIGKILL all of it.

    ``group``: ``root`` leads a process group (a command started in a session
    of its own), whose members are part of the tree; else only the processes
    below ``root`` are (``root`` is the caller, a guard above its command).
    """
    if group:
        with contextlib.suppress(OSError):
            os.killpg(root, signal.SIGSTOP)
    stopped: set[int] = set()
    for _ in range(rounds):
        fresh = members(root, group=group) - stopped
        if not fresh:
            break
        _signal(fresh, signal.SIGSTOP)
        stopped |= fresh
    if group:
        with contextlib.suppress(OSError):
            os.killpg(root, signal.SIGKILL)
    _signal(stopped | members(root, group=group), signal.SIGKILL)
