"""Writing a verified set of file changes, all or nothing.

The write phase runs in three steps so that a failure at any point can be
undone:

1. every new content is written to a temporary file beside its target (no
   target is touched yet; a failure here only removes the temporaries);
2. temporaries are renamed over their targets and deleted files are renamed
   aside, each step journaled; a failure rolls the journal back in reverse,
   restoring replaced files from the bytes read during verification;
3. the renamed-aside deleted files are removed.

A rename within one folder is atomic, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from zuno.patch.model import PatchWriteError

__all__ = ["FileChange", "commit_changes"]

_NEW_FILE_MODE = 0o666  # narrowed by the process umask, like any new file


@dataclass(frozen=True, slots=True)
class FileChange:
    """One change to one file on disk.

    Attributes:
        path: The path to write or delete (for a write: the real target, so a
            symlink inside the workspace is kept and its target updated).
        data: The new bytes, or None to delete the file.
        original: The bytes before the patch, or None when the file did not exist.
        mode: The permission bits to give the written file (None: the default).
    """

    path: Path
    data: bytes | None
    original: bytes | None
    mode: int | None = None


@dataclass(slots=True)
class _Step:
    change: FileChange
    aside: Path | None = None
    """Where a deleted file was renamed to until the commit completes."""


def commit_changes(changes: Sequence[FileChange]) -> None:
    """Write every change, or none.

    Args:
        changes: The changes, at most one per path.

    Raises:
        PatchWriteError: Writing failed. ``restored`` says whether every file is
            back as it was; the message names the file that failed.
    """
    created_dirs: list[Path] = []
    temps: dict[Path, Path] = {}
    try:
        for change in changes:
            if change.data is not None:
                created_dirs.extend(_make_parents(change.path))
                temps[change.path] = _write_temp(change.path, change.data, _mode_for(change))
    except OSError as error:
        _discard(temps.values(), created_dirs)
        raise PatchWriteError(
            f"writing failed before any file was changed: {_describe(error)}", restored=True
        ) from error
    done: list[_Step] = []
    try:
        for change in changes:
            step = _Step(change)
            if change.data is None:
                step.aside = _aside_name(change.path, "del")
                os.rename(change.path, step.aside)
            else:
                os.replace(temps[change.path], change.path)
                del temps[change.path]
            done.append(step)
    except OSError as error:
        problems = _roll_back(done)
        _discard(temps.values(), created_dirs)
        if problems:
            raise PatchWriteError(
                f"writing failed ({_describe(error)}) and restoring failed for "
                f"{', '.join(problems)}: these files may be in a mixed state; inspect them",
                restored=False,
            ) from error
        raise PatchWriteError(
            f"writing failed ({_describe(error)}); every file was restored as it was",
            restored=True,
        ) from error
    for step in done:
        if step.aside is not None:
            with contextlib.suppress(OSError):
                os.unlink(step.aside)


def _mode_for(change: FileChange) -> int | None:
    if change.mode is not None:
        return change.mode
    try:
        return stat.S_IMODE(os.stat(change.path).st_mode)
    except OSError:
        return None


def _aside_name(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.zuno-{tag}")


def _write_temp(path: Path, data: bytes, mode: int | None) -> Path:
    """Write data to a new temporary file beside path and return its name."""
    temp = _aside_name(path, "tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _NEW_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temp, mode)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return temp


def _make_parents(path: Path) -> list[Path]:
    """Create the missing folders above path; return them, outermost first."""
    missing: list[Path] = []
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    missing.reverse()
    for folder in missing:
        os.mkdir(folder)
    return missing


def _roll_back(done: list[_Step]) -> list[str]:
    """Undo the journaled steps, newest first; return the paths that could not be restored."""
    problems: list[str] = []
    for step in reversed(done):
        change = step.change
        try:
            if step.aside is not None:
                os.rename(step.aside, change.path)
            elif change.original is None:
                os.unlink(change.path)
            else:
                temp = _write_temp(change.path, change.original, _mode_for(change))
                os.replace(temp, change.path)
        except OSError:
            problems.append(str(change.path))
    return problems


def _discard(temps: Iterable[Path], created_dirs: list[Path]) -> None:
    """Remove leftover temporaries and the folders created for new files."""
    for temp in list(temps):
        with contextlib.suppress(OSError):
            os.unlink(temp)
    for folder in reversed(created_dirs):
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def _describe(error: OSError) -> str:
    where = f" {error.filename}" if error.filename else ""
    return f"{error.strerror or error}{where}"
