"""Writing a verified set of file changes, all or nothing, beneath their roots.

The write phase runs in three steps so that a failure at any point can be
undone:

1. every target's folder is opened beneath its root (see :mod:`zuno.workspace.beneath`:
   no symlink leading out is followed, whoever swaps one in) and every new
   content is written to a temporary file in that folder; no target is
   touched yet, and a failure here only removes the temporaries (and the
   folders made for new files);
2. temporaries are renamed over their targets and deleted files are renamed
   aside, each step journaled and each naming its file relative to the folder
   opened in step 1; a failure rolls the journal back in reverse, restoring
   replaced files from the bytes read during verification;
3. the renamed-aside deleted files are removed.

A rename within one folder is atomic, so a reader never sees half a file.

A :class:`WriteGuard` (the file tools pass their session's
:class:`~zuno.durability.file_versions.WriteClaim`) is shown, in step 1, where each
change lands and its current content; it may refuse, and nothing is written.
With a guard, each file must also still hold the bytes the change was computed
from (:attr:`FileChange.original`), or :class:`ChangedMeanwhile` refuses the
commit. Once every change is in place, the guard is told what was written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from zuno.workspace.beneath import Beneath, Confined, Spot
from zuno.workspace.patch.model import PatchError, PatchWriteError

__all__ = ["ChangedMeanwhile", "FileChange", "LandingCheck", "WriteGuard", "commit_changes"]

LandingCheck = Callable[[Confined, Path], None]
"""Called with each change's path and where it really lands, before anything is
written; raising refuses the whole commit (see :mod:`zuno.dispatch.landing`)."""


class WriteGuard(Protocol):
    """Decides, before anything is written, whether a file may be replaced, and hears the result."""

    def verify(
        self,
        path: str | Path,
        info: os.stat_result | None,
        content: Callable[[], bytes],
        shown: str,
        *,
        anchored: bool = False,
    ) -> None:
        """Raise to refuse replacing (or deleting) the file that ``path`` names.

        Args:
            path: Where the change really lands.
            info: Its status now, None when there is no file.
            content: Its current bytes.
            shown: The path for messages.
            anchored: The change was computed by matching the file's content
                (:attr:`FileChange.anchored`), and the commit refuses it unless
                the file still holds those bytes.
        """
        ...

    def wrote(self, path: str | Path, data: bytes | None) -> None:
        """``data`` is now at ``path`` (None: the file was deleted)."""
        ...


class ChangedMeanwhile(PatchError):
    """A file no longer holds the bytes its change was computed from; nothing was written."""


@dataclass(frozen=True, slots=True)
class FileChange:
    """One change to one file on disk.

    Attributes:
        path: The file, beneath the root it must stay in. A write follows a
            symlink at this path to its target (beneath the same root), so the
            link is kept; a delete removes the name itself.
        data: The new bytes, or None to delete the file.
        original: The bytes before the patch, or None when the file did not exist.
        mode: The permission bits to give the written file (None: keep the
            current file's, or the default for a new one).
        anchored: The new content was computed by finding text in
            ``original`` (an edit's old_string, a patch's hunks), not given
            whole. The commit writes it only while the file still holds
            ``original``, so it can overwrite nothing its caller did not match.
    """

    path: Confined
    data: bytes | None
    original: bytes | None
    mode: int | None = None
    anchored: bool = False


@dataclass(slots=True)
class _Step:
    change: FileChange
    spot: Spot
    lands: Path | None = None
    """Where the change lands, when a guard looked at it."""
    temp: str | None = None
    """The temporary file holding the new content, until it is renamed into place."""
    aside: str | None = None
    """Where a deleted file was renamed to until the commit completes."""


def commit_changes(
    changes: Sequence[FileChange],
    check: LandingCheck | None = None,
    guard: WriteGuard | None = None,
) -> None:
    """Write every change, or none.

    Args:
        changes: The changes, at most one per path.
        check: Looks at where each change really lands once its folder is
            open; what it raises propagates, and nothing is changed.
        guard: Sees each file's current content before anything is written
            (what it raises propagates, and nothing is changed), and each
            change once all are written.

    Raises:
        EscapesRoot: A path leads out of its root (a symlink swapped in since
            the patch was verified); nothing was changed.
        ChangedMeanwhile: With a guard: a file changed since its change was
            computed; nothing was changed.
        PatchWriteError: Writing failed. ``restored`` says whether every file is
            back as it was; the message names the file that failed.
    """
    with ExitStack() as stack:
        roots: dict[Path, Beneath] = {}

        def root_of(change: FileChange) -> Beneath:
            where = change.path.root
            if where not in roots:
                roots[where] = stack.enter_context(Beneath(where))
            return roots[where]

        # The roots are entered before the steps run, so a failure leaving the
        # block also removes the folders made for new files (see Beneath).
        steps: list[_Step] = []
        try:
            for change in changes:
                steps.append(_prepare(root_of(change), change, check, guard))
        except BaseException as error:
            _discard(steps)
            if not isinstance(error, OSError):
                raise  # a refusal (EscapesRoot, the check's): nothing was changed
            raise PatchWriteError(
                f"writing failed before any file was changed: {_describe(error)}", restored=True
            ) from error
        _apply(steps)
        if guard is not None:
            for step in steps:
                if step.lands is not None:
                    guard.wrote(step.lands, step.change.data)
        for folder in {id(step.spot.folder): step.spot.folder for step in steps}.values():
            folder.sync()


def _prepare(
    root: Beneath, change: FileChange, check: LandingCheck | None, guard: WriteGuard | None
) -> _Step:
    """Open the change's folder beneath its root and stage its new content there."""
    shown = str(change.path.path)
    try:
        return _stage(root, change, shown, check, guard)
    except OSError as error:
        error.filename = shown  # not the temporary's name, nor one relative to its folder
        raise


def _stage(
    root: Beneath,
    change: FileChange,
    shown: str,
    check: LandingCheck | None,
    guard: WriteGuard | None,
) -> _Step:
    writing = change.data is not None
    spot = root.locate(change.path.rel, follow_links=writing, create_folders=writing)
    lands = root.real_path(spot)
    if check is not None:
        check(change.path, lands)
    step = _Step(change, spot)
    if guard is not None:
        step.lands = _guarded(spot, lands, change, guard)
    st = spot.stat
    if change.data is None:
        if st is None:
            raise FileNotFoundError(errno.ENOENT, "the file to delete is gone", shown)
        return step
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "not a regular file any more", shown)
    mode = change.mode if change.mode is not None else _mode(st)
    owner = None if st is None else (st.st_uid, st.st_gid)
    step.temp = spot.folder.write_temporary(spot.name, change.data, mode=mode, owner=owner)
    return step


def _apply(steps: list[_Step]) -> None:
    """Rename every temporary into place and every deleted file aside; roll back on failure."""
    done: list[_Step] = []
    shown = ""
    try:
        for step in steps:
            shown = str(step.change.path.path)
            folder, name = step.spot.folder, step.spot.name
            if step.change.data is None:
                step.aside = folder.rename_aside(name, "del")
            else:
                assert step.temp is not None
                folder.replace(step.temp, name)
                step.temp = None
            done.append(step)
    except OSError as error:
        error.filename = shown  # not the temporary's name, nor one relative to its folder
        problems = _roll_back(done)
        _discard(steps)
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
                step.spot.folder.remove(step.aside)


def _guarded(spot: Spot, lands: Path, change: FileChange, guard: WriteGuard) -> Path | None:
    """Show the guard the file the change replaces; return where it lands (None: not tracked)."""
    st = spot.stat
    if change.data is None and st is not None and stat.S_ISLNK(st.st_mode):
        return None  # deleting a link removes a name; the file it leads to is untouched
    shown = change.path.rel.as_posix()
    current: bytes | None = None
    if st is not None and stat.S_ISREG(st.st_mode):
        current = spot.folder.read(spot.name)
    guard.verify(
        lands,
        st if current is not None else None,
        lambda: current or b"",
        shown,
        anchored=change.anchored,
    )
    if current != change.original:
        raise ChangedMeanwhile(
            f"{shown} changed while the change was being prepared; nothing was written. "
            "Read it again and redo the change"
        )
    return lands


def _mode(st: os.stat_result | None) -> int | None:
    return None if st is None else stat.S_IMODE(st.st_mode)


def _roll_back(done: list[_Step]) -> list[str]:
    """Undo the journaled steps, newest first; return the paths that could not be restored."""
    problems: list[str] = []
    for step in reversed(done):
        change, folder, name = step.change, step.spot.folder, step.spot.name
        try:
            if step.aside is not None:
                folder.replace(step.aside, name)
            elif change.original is None:
                folder.remove(name)
            else:
                st = step.spot.stat
                owner = None if st is None else (st.st_uid, st.st_gid)
                temp = folder.write_temporary(name, change.original, mode=_mode(st), owner=owner)
                folder.replace(temp, name)
        except OSError:
            problems.append(str(change.path.path))
    return problems


def _discard(steps: list[_Step]) -> None:
    """Remove the temporaries still waiting to be renamed into place."""
    for step in steps:
        if step.temp is not None:
            with contextlib.suppress(OSError):
                step.spot.folder.remove(step.temp)
            step.temp = None


def _describe(error: OSError) -> str:
    where = f" {error.filename}" if error.filename else ""
    return f"{error.strerror or error}{where}"
