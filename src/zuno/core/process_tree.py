"""Finding and killing a command's whole tree of processes, from ``/proc``.

A command runs in a session of its own; its tree is that session, its
process group, and every descendant of its leader. :func:`kill_process_tree`
freezes the tree, then kills all of it. The runner of commands
(:mod:`zuno.execution.process`, :mod:`zuno.execution.pty`) and the worker lease's fence
(:mod:`zuno.durability.fencing`) use it. The freezing and killing is ``_kill_tree.py``'s,
the routine the guard scripts load by path.
"""

from __future__ import annotations

from zuno.core._kill_tree import kill_tree

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
    kill_tree(root, group=True, rounds=5)
