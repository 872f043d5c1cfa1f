"""The workspace's control files, which a sandboxed command may not change.

``zuno.json`` (hooks, servers and rules of the next invocation), ``.zuno/`` and
``.git/`` (hooks and ``core.fsmonitor`` run commands outside any sandbox) are
mounted read-only over the writable workspace, under bubblewrap and Landlock
alike. A mount point can be neither renamed nor removed, so ``mv .git x &&
mkdir .git`` fails as well.

A name that does not exist yet must not be creatable either, and the kernel
can only protect a name that has an inode. So for the lifetime of a command
(a background job's whole life) a missing control name is held by an empty,
read-only placeholder directory (mode 0555), mounted read-only in the sandbox
and removed afterwards. An empty directory changes nothing: git skips an empty
``.git``, the configuration loader reads ``zuno.json`` only when it is a file.

Several commands, in this process or another, may share a placeholder: each
holds a shared ``flock`` on it while its command runs, and whoever ends last
(an exclusive lock succeeds) removes it. A placeholder left by a crash is
recognised by its mode and removed the same way by the next command.

Zuno's own folders (the user's config folder with the trust store, the data
folder, the command server's run folder) may lie inside a writable folder too:
the workspace may be ``$HOME``, or the config folder a symlink into the
workspace. :func:`sealed_folders` says how to keep them out of reach wherever
they lie: each one's real folder is mounted read-only; every folder between a
writable root and it is *pinned* (bound over itself, still writable) so that
it can be neither renamed nor removed, which would let a command put a fresh
folder under the old name; and a symlink on the way is protected by making the
folder that holds it read-only (a link cannot carry a mount of its own).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Collection, Generator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CONTROL_NAMES",
    "PLACEHOLDER_MODE",
    "SealedFolders",
    "held_control_files",
    "sealed_folders",
]

CONTROL_NAMES: tuple[str, ...] = ("zuno.json", ".zuno", ".git")
"""Entries of the workspace's top folder that commands may read but not change."""

PLACEHOLDER_MODE = 0o555
"""The mode that marks an empty directory as a placeholder Zuno made."""

_ATTEMPTS = 5
"""Tries to take a placeholder that another command is removing at the same moment."""


def _is_placeholder(path: Path) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or stat.S_IMODE(info.st_mode) != PLACEHOLDER_MODE:
        return False
    try:
        return not any(os.scandir(path))
    except OSError:
        return False


def _hold(path: Path) -> int | None:
    """An fd on path with a shared lock, creating a placeholder when it is missing.

    Returns None when path is a symlink (a link cannot carry a mount; see
    :func:`held_control_files`), not a file or folder, or missing from a folder
    that cannot be written at all.
    """
    for _ in range(_ATTEMPTS):
        try:
            os.mkdir(path, PLACEHOLDER_MODE)
            # The umask may have taken bits away; the mode is the marker.
            os.chmod(path, PLACEHOLDER_MODE)
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                return None  # a folder Zuno cannot write, and neither can its commands
            raise
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None
            if exc.errno == errno.ENOENT:
                continue  # removed by a command that just ended: make it again
            raise
        fcntl.flock(fd, fcntl.LOCK_SH)
        # Still the same entry (not removed while the lock was awaited)?
        try:
            same = os.path.samestat(os.fstat(fd), path.lstat())
        except FileNotFoundError:
            same = False
        if same:
            kind = stat.S_IFMT(os.fstat(fd).st_mode)
            if kind in (stat.S_IFDIR, stat.S_IFREG):
                return fd
            os.close(fd)
            return None
        os.close(fd)
    raise OSError(errno.EBUSY, f"cannot hold {path}: it keeps changing")


def _release(path: Path, fd: int) -> None:
    """Drop the lock; remove path when it is a placeholder nobody else holds."""
    try:
        if _is_placeholder(path):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another command still holds it and removes it when it ends
            with contextlib.suppress(OSError):
                os.rmdir(path)  # fails harmlessly when something was put in it
    finally:
        os.close(fd)


@contextlib.contextmanager
def held_control_files(
    workspace: Path, granted: Collection[Path] = ()
) -> Generator[tuple[Path, ...]]:
    """The workspace's control paths, each existing (a placeholder if need be) while open.

    Yields the paths to mount read-only: every control name except a symlink,
    whose link cannot carry a mount (it could be replaced; a documented
    limit), and except one the user granted on purpose by naming it exactly in
    granted (``sandbox.writable_roots``, e.g. ``.git`` so commands may commit).
    """
    skip = {p.resolve() for p in granted}
    held: list[tuple[Path, int]] = []
    try:
        for name in CONTROL_NAMES:
            path = workspace / name
            if path.resolve() in skip:
                continue
            fd = _hold(path)
            if fd is not None:
                held.append((path, fd))
        yield tuple(p for p, _ in held)
    finally:
        for path, fd in reversed(held):
            _release(path, fd)


@dataclass(frozen=True, slots=True)
class SealedFolders:
    """The mounts that keep Zuno's own folders out of a command's reach.

    Attributes:
        read_only: Real paths to bind read-only, parents before children.
        pinned: Real folders to bind over themselves (still writable), parents
            before children, so that they cannot be renamed or removed.
    """

    read_only: tuple[Path, ...] = ()
    pinned: tuple[Path, ...] = ()


def _below(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _walk(path: Path) -> tuple[Path, list[Path]]:
    """The real location of path, and the folders holding each symlink met on the way."""
    holders: list[Path] = []
    current = Path("/")
    parts = list(path.parts[1:])
    links = 0
    while parts:
        name = parts.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = current.parent
            continue
        candidate = current / name
        try:
            target = os.readlink(candidate)
        except OSError:
            current = candidate
            continue
        links += 1
        if links > 40:  # a loop: the kernel would refuse it as well
            return candidate, holders
        holders.append(current)
        if target.startswith("/"):
            current = Path("/")
        parts[:0] = [p for p in target.split("/") if p]
    return current, holders


def sealed_folders(authority: Iterable[Path], writable: Sequence[Path]) -> SealedFolders:
    """How to keep each authority path unchangeable for a command that may write writable.

    Args:
        authority: Absolute paths Zuno reads as authority, as Zuno names them
            (symlinks are followed here, once, before the command starts).
        writable: The real folders the command may write.

    A path outside every writable folder needs nothing (it is read-only
    already); a missing one is skipped (nothing to mount: the caller makes the
    folders that must exist before the command starts).
    """
    roots = [w.resolve() for w in writable]

    def inside(p: Path) -> Path | None:
        return next((r for r in roots if _below(p, r)), None)

    read_only: set[Path] = set()
    for path in authority:
        real, holders = _walk(Path(os.path.abspath(path)))
        for holder in holders:
            # A link right in a writable root would take the whole root with it;
            # that layout is reported at start instead (see zuno.policy.control_paths).
            if inside(holder) is not None and holder not in roots:
                read_only.add(holder)
        if inside(real) is not None and os.path.lexists(real):
            read_only.add(real)
    pinned: set[Path] = set()
    for folder in read_only:
        root = inside(folder)
        if root is None:
            continue
        for parent in folder.parents:
            if parent == root or not _below(parent, root):
                break
            pinned.add(parent)
    # A pin inside a read-only folder would open a writable window in it.
    pinned = {p for p in pinned if not any(_below(p, r) for r in read_only)}
    return SealedFolders(tuple(sorted(read_only, key=_depth)), tuple(sorted(pinned, key=_depth)))


def _depth(path: Path) -> int:
    return len(path.parts)
