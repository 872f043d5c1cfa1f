"""The watched path of a snapshot: the previous tree plus the paths that changed.

When the folder watch names every path that changed since the previous
snapshot, the new tree is the previous one with those paths read again, and
nothing else is looked at: its cost follows the change, not the workspace.
:func:`changed_entries` reads each named path (a blob written per file) and
says what it now is; :meth:`zuno.workspace.checkpoints.objects.ObjectStore.edit` builds
the tree.

Whatever this path cannot decide exactly as git's full look would, it hands
back by raising :class:`~zuno.workspace.checkpoints.objects.EditConflict`: a path that is
now a folder, a file that cannot be read, a folder on the way that is a nested
repository, a new folder holding a ``.git``. Paths new to the tree go through
``git check-ignore`` (the ignore rules and Zuno's own exclusions); paths
already in it stay, ignored or not, as in git. Paths a deny rule keeps from
``read`` are dropped (:mod:`zuno.workspace.checkpoints.privacy`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from zuno.workspace.checkpoints.objects import EditConflict, ObjectStore, large_stand_in
from zuno.workspace.checkpoints.privacy import DeniedPaths

__all__ = ["changed_entries", "entries_to_set", "large_files", "read_entries"]

Found = tuple[str, str] | None
"""A path's new tree entry, (mode, blob id), or None: absent from the snapshot."""


def changed_entries(
    workspace: Path,
    objects: ObjectStore,
    tree: str,
    paths: Sequence[str],
    *,
    denied: DeniedPaths,
    large: int,
    ignored: Callable[[list[str]], set[str]],
) -> dict[str, Found]:
    """What each of ``paths`` is now, as entries to set in ``tree`` (only real changes).

    Args:
        workspace: The workspace folder.
        objects: The store's objects (blobs are written there).
        tree: The previous snapshot's tree.
        paths: Workspace-relative paths that may have changed.
        denied: Paths never read.
        large: Files above this size are recorded by a stand-in.
        ignored: Which of the given new paths the ignore rules leave out.

    Raises:
        EditConflict: Only the full look can tell (see the module's text).
    """
    for path in paths:
        _not_nested(objects, tree, path)
    now = read_entries(workspace, objects, paths, denied=denied, large=large)
    return entries_to_set(workspace, objects, tree, now, ignored=ignored)


def read_entries(
    workspace: Path, objects: ObjectStore, paths: Sequence[str], *, denied: DeniedPaths, large: int
) -> dict[str, Found]:
    """What each of ``paths`` is now (its blob written), before comparing with any tree.

    Raises:
        EditConflict: A path is a folder or cannot be read.
    """
    now: dict[str, Found] = {}
    for path in paths:
        entry = None
        if not denied.covers(path) and _beneath_folders(workspace, path):
            entry = _read(workspace / path, objects, large)
        now[path] = entry
    return now


def entries_to_set(
    workspace: Path,
    objects: ObjectStore,
    tree: str,
    now: dict[str, Found],
    *,
    ignored: Callable[[list[str]], set[str]],
) -> dict[str, Found]:
    """The entries of :func:`read_entries` that differ from ``tree`` (new paths the
    ignore rules leave out dropped).

    Raises:
        EditConflict: A path is a nested repository, or a new folder holds one.
    """
    found: dict[str, Found] = {}
    new: list[str] = []
    for path, entry in now.items():
        old = _not_nested(objects, tree, path)
        if entry is not None and old is None:
            new.append(path)
        if entry != old:
            found[path] = entry
    if new:
        _check_new_folders(workspace, objects, tree, new)
        for path in ignored(new):
            found.pop(path, None)
    return found


def _not_nested(objects: ObjectStore, tree: str, path: str) -> Found:
    """The entry of ``path`` in ``tree``; EditConflict when it is a nested repository."""
    old = objects.lookup(tree, path)
    if old is not None and old[0] == "160000":
        raise EditConflict(f"{path} is a nested repository")
    return old


def _beneath_folders(workspace: Path, path: str) -> bool:
    """Whether every parent of ``path`` is a real folder (not a symlink): else, to git,
    the path does not exist."""
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        try:
            st = os.lstat(workspace.joinpath(*parts[:i]))
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as exc:
            raise EditConflict(f"cannot look at {path}: {exc}") from exc
        if not stat.S_ISDIR(st.st_mode):
            return False
    return True


def _read(path: Path, objects: ObjectStore, large: int) -> Found:
    """The entry of one workspace path as it is now (None: absent or not a file)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise EditConflict(f"cannot look at {path}: {exc}") from exc
    if stat.S_ISDIR(st.st_mode):
        raise EditConflict(f"{path} is a folder")
    if stat.S_ISLNK(st.st_mode):
        return ("120000", objects.write("blob", os.fsencode(os.readlink(path))))
    if not stat.S_ISREG(st.st_mode):
        return None  # sockets, pipes, devices: git records none
    mode = "100755" if st.st_mode & stat.S_IXUSR else "100644"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise EditConflict(f"cannot read {path}: {exc}") from exc
    try:
        size = os.fstat(fd).st_size
        if size > large:
            return (mode, objects.write("blob", large_stand_in(fd, size)))
        chunks: list[bytes] = []
        while chunk := os.read(fd, max(size + 1, 1 << 16)):
            chunks.append(chunk)
        return (mode, objects.write("blob", b"".join(chunks)))
    except OSError as exc:
        raise EditConflict(f"cannot read {path}: {exc}") from exc
    finally:
        os.close(fd)


def _check_new_folders(workspace: Path, objects: ObjectStore, tree: str, new: list[str]) -> None:
    """A folder new to the tree that holds a ``.git`` is a nested repository: full look."""
    seen: set[str] = set()
    for path in new:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            folder = "/".join(parts[:i])
            if folder in seen:
                continue
            seen.add(folder)
            if objects.lookup(tree, folder) is None and os.path.lexists(
                workspace / folder / ".git"
            ):
                raise EditConflict(f"{folder} is a nested repository")


def large_files(workspace: Path, large: int) -> list[str]:
    """Workspace-relative paths of regular files above ``large`` bytes (``.git`` aside).

    One ``find`` (no Python stat per file): the full look excludes these from
    git and records a stand-in for each.
    """
    try:
        proc = subprocess.run(
            [
                "find",
                ".",
                "-name",
                ".git",
                "-prune",
                "-o",
                "-type",
                "f",
                "-size",
                f"+{large}c",
                "-print0",
            ],
            cwd=workspace,
            capture_output=True,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    found: list[str] = []
    for raw in proc.stdout.split(b"\0"):
        if raw.startswith(b"./"):
            with contextlib.suppress(UnicodeDecodeError):
                found.append(os.fsdecode(raw[2:]))
    return found
