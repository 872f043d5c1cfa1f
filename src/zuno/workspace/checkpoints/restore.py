"""Restoring workspace paths from checkpoint entries, beneath the workspace only."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath

from zuno.workspace.beneath import Beneath, EscapesRoot
from zuno.workspace.checkpoints.objects import is_large_stand_in
from zuno.workspace.checkpoints.types import (
    EXECUTABLE,
    GITLINK,
    SYMLINK,
    CheckpointError,
    Entry,
    Restored,
)

__all__ = ["restore"]


def restore(
    workspace: Path,
    targets: Mapping[str, Entry | None],
    blobs: Callable[[list[str]], dict[str, bytes]],
) -> Restored:
    """Make each path of the workspace what its target says (None: absent).

    Removals come first (and the folders they leave empty are removed), then
    the writes, so a file may become a folder and back. Every step is made
    beneath the workspace, never through a symlink leading out of it.

    Raises:
        CheckpointError: A path could not be restored; the ones before it were.
    """
    done = Restored()
    with Beneath(workspace) as root:
        for path in sorted(p for p, t in targets.items() if t is None):
            if _remove(root, path):
                done.removed.append(path)
        _prune(workspace, sorted(p for p, t in targets.items() if t is None))
        writes = {p: t for p, t in targets.items() if t is not None}
        contents = blobs([t.oid for t in writes.values() if t.mode != GITLINK])
        for path in sorted(writes):
            entry = writes[path]
            if entry.mode == GITLINK:
                done.skipped.append(path)
                continue
            if is_large_stand_in(contents[entry.oid]):
                done.too_large.append(path)
                continue
            _write(root, path, entry, contents[entry.oid])
            done.written.append(path)
    return done


def _remove(root: Beneath, path: str) -> bool:
    try:
        spot = root.locate(PurePosixPath(path), follow_links=False)
    except FileNotFoundError:
        return False
    except (OSError, EscapesRoot) as exc:
        raise CheckpointError(f"cannot remove {path}: {exc}") from exc
    if spot.stat is None:
        return False
    if stat.S_ISDIR(spot.stat.st_mode):
        raise CheckpointError(f"cannot remove {path}: it is now a folder")
    spot.folder.remove(spot.name)
    return True


def _prune(workspace: Path, removed: list[str]) -> None:
    """Remove the folders that removing files left empty (never the workspace)."""
    folders = {str(PurePosixPath(p).parent) for p in removed}
    candidates: set[str] = set()
    for folder in folders:
        parts = PurePosixPath(folder).parts
        for i in range(len(parts), 0, -1):
            candidates.add("/".join(parts[:i]))
    for folder in sorted(candidates, key=lambda f: f.count("/"), reverse=True):
        path = workspace / folder
        # lstat: a symlink to a folder is not pruned (it is a file to git).
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(path).st_mode):
                os.rmdir(path)  # only succeeds when empty


def _write(root: Beneath, path: str, entry: Entry, data: bytes) -> None:
    try:
        spot = root.locate(PurePosixPath(path), follow_links=False, create_folders=True)
    except (OSError, EscapesRoot) as exc:
        raise CheckpointError(f"cannot restore {path}: {exc}") from exc
    folder, name = spot.folder, spot.name
    if spot.stat is not None and stat.S_ISDIR(spot.stat.st_mode):
        try:
            # Folders holding only empty folders hold nothing a checkpoint records: they may go.
            _remove_empty_folders(folder.fd, name)
        except OSError:
            raise CheckpointError(
                f"cannot restore {path}: a folder is in its place (with files the "
                "checkpoints do not cover, such as ignored ones)"
            ) from None
        spot = root.locate(PurePosixPath(path), follow_links=False, create_folders=True)
    if entry.mode == SYMLINK:
        if spot.stat is not None:
            folder.remove(name)
        os.symlink(os.fsdecode(data), name, dir_fd=folder.fd)
        return
    executable = entry.mode == EXECUTABLE
    if spot.stat is not None and stat.S_ISREG(spot.stat.st_mode):
        # Keep the file's other permission bits; git records only the executable one.
        mode = stat.S_IMODE(spot.stat.st_mode)
        mode = mode | (0o111 & ~_umask() & _read_bits(mode)) if executable else mode & ~0o111
    else:
        mode = (0o777 if executable else 0o666) & ~_umask()
    temp = folder.write_temporary(name, data, mode=mode, owner=None)
    try:
        folder.replace(temp, name)
    except BaseException:
        with contextlib.suppress(OSError):
            folder.remove(temp)
        raise


def _remove_empty_folders(parent_fd: int, name: str) -> None:
    """Remove the folder ``name`` if it holds nothing but (nested) empty folders.

    Raises:
        OSError: Something else is in it (a file, a symlink); what was empty may be gone.
    """
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    try:
        with os.scandir(fd) as entries:
            inner = [e.name for e in entries]
        for child in inner:
            _remove_empty_folders(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def _umask() -> int:
    """This process's umask, read without changing it (other threads may create files)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def _read_bits(mode: int) -> int:
    """Execute bits for whoever may read (``chmod +x`` on a 0o640 file gives 0o750)."""
    return ((mode & 0o444) >> 2) | 0o100
