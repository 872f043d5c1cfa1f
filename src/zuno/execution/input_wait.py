"""Seeing a process wait for input, from ``/proc``.

A process blocked reading its terminal (or its stdin pipe) is waiting for
input. It is seen from ``/proc``, which the host can read under bubblewrap and
Landlock alike: a process of the tree (in the terminal's foreground group,
when there is one) sleeping in ``read`` (or ``readv``, ``pread64``) on a
descriptor that is the terminal (or ``/dev/tty``, or the stdin pipe), or in
``select``, ``poll`` or ``epoll`` with the terminal as its stdin. Where
``/proc`` cannot be read, nothing is detected.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import platform
import stat
import struct
import termios

from zuno.execution.process import proc_stat

__all__ = ["reading_input", "unread_bytes"]

_X86_64 = {"reads": {0, 17, 19}, "polls": {7, 23, 232, 270, 271, 281, 441}}
_AARCH64 = {"reads": {63, 65, 67}, "polls": {22, 72, 73, 441}}
_SYSCALLS = _AARCH64 if platform.machine() in ("aarch64", "arm64") else _X86_64
_DEV_TTY = os.makedev(5, 0)


def _stat_of(pid: str) -> tuple[int, int, str] | None:
    """(ppid, process group, state letter) of pid, or None when it is gone."""
    stat = proc_stat(pid)
    return None if stat is None else (stat[1], stat[2], stat[0])


def _tree(root: int) -> dict[str, tuple[int, int, str]]:
    """root and its descendants: pid -> (ppid, process group, state)."""
    table: dict[str, tuple[int, int, str]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                found = _stat_of(entry.name)
                if found is not None:
                    table[entry.name] = found
    children: dict[int, list[str]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    members: dict[str, tuple[int, int, str]] = {}
    todo = [str(root)]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in members:
            members[pid] = table[pid]
            todo += children.get(int(pid), [])
    return members


def _blocked_syscall(pid: str) -> tuple[int, int] | None:
    """(syscall number, first argument) of a process sleeping in a syscall, else None."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
        return int(fields[0]), int(fields[1], 16)
    except (OSError, ValueError, IndexError):
        return None


def _fd_is(pid: str, fd: int, input_id: tuple[int, int]) -> bool:
    """Whether descriptor fd of pid is the process's input (or its controlling /dev/tty)."""
    try:
        st = os.stat(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return False
    if (st.st_dev, st.st_ino) == input_id:
        return True
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == _DEV_TTY


def reading_input(root: int, input_id: tuple[int, int], foreground: int | None) -> bool:
    """Whether a process of root's tree sleeps reading the given input.

    Args:
        root: The process started for the command (the sandbox wrapper).
        input_id: ``(st_dev, st_ino)`` of the terminal's slave side or the stdin pipe.
        foreground: The terminal's foreground process group, or None for a
            command on pipes. On a terminal only its members count: the
            sandbox's own processes outside it wait in ``poll`` with the
            terminal as their stdin too. On pipes only a plain read counts,
            for the same reason.
    """
    for pid, (_, group, state) in _tree(root).items():
        if state != "S" or (foreground is not None and group != foreground):
            continue
        call = _blocked_syscall(pid)
        if call is None:
            continue
        number, first = call
        if number in _SYSCALLS["reads"] and _fd_is(pid, first, input_id):
            return True
        if foreground is not None and number in _SYSCALLS["polls"] and _fd_is(pid, 0, input_id):
            return True
    return False


def unread_bytes(fd: int) -> int:
    """Bytes waiting to be read on fd (FIONREAD); 0 when it cannot be asked."""
    try:
        raw = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return int(struct.unpack("i", raw)[0])
