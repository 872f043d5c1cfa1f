"""Which workspace paths changed since the last look: inotify, like git's fsmonitor.

A :class:`FolderWatch` watches every folder of a workspace (but ``.git``
folders and the ones it is told to leave alone) and, when drained, names the
paths that were created, written, closed after writing, had their attributes
changed, were removed or moved, relative to the workspace. Folders that appear
are watched as they are reported; whatever happened inside them before is
covered by naming the folder itself.

It can only say "these paths, and nothing else" while the kernel kept every
event. Whenever that is in doubt it says so by returning None from
:meth:`FolderWatch.drain`, and the caller must then look at the whole
workspace: the event queue overflowed, the watch limit was reached, the
workspace folder itself was removed, moved or unmounted, a ``.git`` folder
came or went (a folder became a nested repository), the process forked, or
any error.

Linux only; elsewhere :func:`FolderWatch.start` returns None. Not seen by
inotify (so not by this watch, as not by git's fsmonitor): writes through a
hard link from outside the workspace, writes through a shared memory map,
changes made on another machine to a network file system.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys
import weakref
from collections.abc import Sequence
from pathlib import Path

__all__ = ["FolderWatch"]

_IN_MODIFY = 0x2
_IN_ATTRIB = 0x4
_IN_CLOSE_WRITE = 0x8
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_UNMOUNT = 0x2000
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_ISDIR = 0x40000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC

_CHANGES = (
    _IN_CREATE
    | _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_DELETE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
)
_MASK = _CHANGES | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW
_ARRIVED = _IN_CREATE | _IN_MOVED_TO
_CAME_OR_WENT = _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
_READ = 256 * 1024
_MAX_PATHS = 2000  # more changed paths than this: the whole workspace is looked at anyway


class _Lost(Exception):
    """An event may have been missed; only a full look is exact now."""


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError):
        return None
    return libc


class FolderWatch:
    """An inotify watch of every folder of one workspace, in this process."""

    def __init__(self, libc: ctypes.CDLL, fd: int, root: Path, skip: Sequence[Path]) -> None:
        """Use :meth:`start`."""
        self._libc = libc
        self._fd = fd
        self._root = root
        self._skip = {os.fsencode(p) for p in skip}
        self._pid = os.getpid()
        self._folders: dict[int, str] = {}  # watch descriptor -> folder ("" the workspace)
        self._root_wd = -1
        self._finalizer = weakref.finalize(self, os.close, fd)

    @classmethod
    def start(cls, root: Path, *, skip: Sequence[Path] = ()) -> FolderWatch | None:
        """Watch every folder under ``root`` (not ``.git`` ones, not those in ``skip``).

        Returns None when the watch cannot be set up (not Linux, no inotify, the
        watch limit reached, a folder that cannot be watched).
        """
        libc = _libc()
        if libc is None:
            return None
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return None
        watch = cls(libc, fd, root, [Path(os.path.realpath(p)) for p in skip])
        try:
            watch._add_tree("")
        except (_Lost, OSError):
            watch.close()
            return None
        if watch._root_wd < 0:
            watch.close()
            return None
        return watch

    def close(self) -> None:
        """Stop watching (the kernel drops every watch with the descriptor)."""
        self._finalizer()

    def drain(self) -> list[str] | None:
        """The paths (relative to the workspace) that changed since the last drain.

        None: an event may have been missed, or too many paths changed; the
        caller must look at the whole workspace, and this watch is of no
        further use (close it and start another).
        """
        if not self._finalizer.alive or os.getpid() != self._pid:
            return None
        try:
            changed = self._read()
        except (_Lost, OSError):
            return None
        return sorted(changed)

    def _read(self) -> set[str]:
        changed: set[str] = set()
        arrived: list[str] = []
        while True:
            try:
                data = os.read(self._fd, _READ)
            except BlockingIOError:
                break
            pos = 0
            while pos + _HEADER.size <= len(data):
                wd, mask, _cookie, size = _HEADER.unpack_from(data, pos)
                raw = data[pos + _HEADER.size : pos + _HEADER.size + size].rstrip(b"\0")
                pos += _HEADER.size + size
                if mask & (_IN_Q_OVERFLOW | _IN_UNMOUNT):
                    raise _Lost
                folder = self._folders.get(wd)
                if folder is None:
                    continue  # a watch already dropped
                if mask & _IN_IGNORED:
                    # The folder was removed (its parent reported it) or unmounted.
                    del self._folders[wd]
                    if wd == self._root_wd:
                        raise _Lost
                    continue
                if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
                    if wd == self._root_wd:
                        raise _Lost
                    continue  # the parent's watch names the folder
                if not raw:
                    continue  # the folder's own attributes: git records none
                name = os.fsdecode(raw)
                if name == ".git" and mask & _CAME_OR_WENT:
                    raise _Lost  # a folder became (or stopped being) a nested repository
                path = f"{folder}/{name}" if folder else name
                changed.add(path)
                if mask & _IN_ISDIR and mask & _ARRIVED:
                    arrived.append(path)
                if len(changed) > _MAX_PATHS:
                    raise _Lost
        # Watch the folders that appeared; what happened inside them before is
        # covered by their own path, which the caller looks at in full.
        for path in arrived:
            self._add_tree(path)
        return changed

    def _add_tree(self, top: str) -> None:
        """Watch ``top`` and every folder under it (relative to the workspace)."""
        pending = [top]
        while pending:
            rel = pending.pop()
            absolute = os.path.join(self._root, rel) if rel else os.fspath(self._root)
            encoded = os.fsencode(absolute)
            if encoded in self._skip:
                continue
            wd = self._libc.inotify_add_watch(self._fd, encoded, _MASK)
            if wd < 0:
                err = ctypes.get_errno()
                if err in (errno.ENOENT, errno.ENOTDIR) and rel:
                    continue  # gone again (or now a file): its parent reported it
                raise _Lost
            self._folders[wd] = rel  # the same folder moved returns its old descriptor
            if not rel:
                self._root_wd = wd
            try:
                entries = list(os.scandir(absolute))
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone again: its parent reported it
            for entry in entries:
                if entry.name != ".git" and entry.is_dir(follow_symlinks=False):
                    pending.append(f"{rel}/{entry.name}" if rel else entry.name)
