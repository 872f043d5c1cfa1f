"""Finding and killing a command's whole tree of processes, from ``/proc``.

A command runs in a session of its own; its tree is that session, its
process group, and every descendant of its leader. :func:`kill_process_tree`
freezes the tree, then kills all of it. The runner of commands
(:mod:`zuno.process`, :mod:`zuno.pty_exec`) and the worker lease's fence
(:mod:`zuno.fencing`) use it; it imports nothing of Zuno.
"""

from __future__ import annotations

import contextlib
import os
import signal

__all__ = ["kill_process_tree", "proc_stat"]


def proc_stat(pid: int | str) -> tuple[str, int, int, int] | None:
    """(state letter, ppid, process group, session) of pid, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ")".
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3])
    except (IndexError, ValueError):
        return None


def _tree_members(root: int) -> set[int]:
    """Processes in root's session or process group, and root's descendants."""
    table: dict[int, tuple[int, int, int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                stat = proc_stat(entry.name)
                if stat is not None:
                    table[int(entry.name)] = stat[1:]
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
    orphaned before the kill escapes this search; under bubblewrap and
    Landlock it is caught anyway, because both run the command as the child
    of the PID namespace's init, which the kill reaches, and the kernel kills
    every process of a namespace whose init is gone. Only the ``none``
    sandbox has no such net.
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
