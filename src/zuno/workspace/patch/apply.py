"""Verifying a whole patch against the files, then writing it all or nothing.

:func:`plan_patch` resolves every path, reads the files and applies every
operation to an in-memory copy of the affected files, in patch order (so an
update may follow an add of the same file). Nothing is written while planning:
any failure leaves every file as it was. :func:`apply_patch` then hands the
resulting changes to :func:`~zuno.workspace.patch.commit.commit_changes`.

Files are read, like they are written, relative to a descriptor of their root
(see :mod:`zuno.workspace.beneath`): a symlink swapped in to lead out of the workspace
can neither feed outside content into the patch nor receive its writes.
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from zuno.workspace.beneath import Beneath, Confined, EscapesRoot
from zuno.workspace.patch.commit import FileChange, LandingCheck, commit_changes
from zuno.workspace.patch.diff import (
    added_file_diff,
    deleted_file_diff,
    replaced_file_diff,
    update_diff,
)
from zuno.workspace.patch.locating import apply_placements, place_chunks
from zuno.workspace.patch.model import AddFile, DeleteFile, Patch, PatchError, UpdateFile
from zuno.workspace.patch.parser import parse_patch
from zuno.workspace.patch.textfile import TextFile

__all__ = ["PatchPlan", "PathResolver", "apply_patch", "plan_patch"]

PathResolver = Callable[[str], Confined]
"""Turns a patch path into a path beneath its root, raising when it is under no root."""

_Kind = Literal["absent", "file", "folder", "other"]
_KIND_WORDS: dict[_Kind, str] = {
    "absent": "nothing",
    "file": "a file",
    "folder": "a folder",
    "other": "a special file (not a regular file)",
}


@dataclass(frozen=True, slots=True)
class PatchPlan:
    """A verified patch, ready to write.

    Attributes:
        patch: The parsed patch.
        changes: The disk changes, at most one per path (an add then a delete of
            the same file cancel out).
        summary: One line per operation: ``A path``, ``M path`` (the new path
            of a move) or ``D path``.
        diff: The unified diff of every operation, against the current files.
    """

    patch: Patch
    changes: tuple[FileChange, ...]
    summary: tuple[str, ...]
    diff: str

    @property
    def output(self) -> str:
        """The model-visible success message."""
        return "Success. Updated the following files:\n" + "\n".join(self.summary)


def plan_patch(patch: Patch | str, resolve: PathResolver) -> PatchPlan:
    """Parse (if needed) and verify a patch against the files, writing nothing.

    Args:
        patch: The patch text or an already parsed patch.
        resolve: Maps each patch path to a path beneath its root; raises for a
            path outside the workspace.

    Returns:
        The verified plan.

    Raises:
        PatchError: The patch is malformed, a path is refused, or an operation
            does not fit the files.
    """
    parsed = parse_patch(patch) if isinstance(patch, str) else patch
    summary: list[str] = []
    diffs: list[str] = []
    with _Files(resolve) as files:
        for op in parsed.operations:
            if isinstance(op, AddFile):
                diffs.append(_add(files, op))
                summary.append(f"A {op.path}")
            elif isinstance(op, DeleteFile):
                diffs.append(_delete(files, op))
                summary.append(f"D {op.path}")
            else:
                diffs.append(_update(files, op))
                summary.append(f"M {op.move_to or op.path}")
        changes = files.changes()
    return PatchPlan(parsed, changes, tuple(summary), "".join(diffs))


def apply_patch(
    patch: Patch | str, resolve: PathResolver, check: LandingCheck | None = None
) -> PatchPlan:
    """Verify a patch, then write all of it or nothing.

    Args:
        patch: The patch text or an already parsed patch.
        resolve: As for :func:`plan_patch`.
        check: Looks at where each change really lands before anything is
            written (see :func:`~zuno.workspace.patch.commit.commit_changes`).

    Returns:
        The plan that was written; ``plan.output`` is the success message.

    Raises:
        PatchError: Nothing was written.
        PatchWriteError: Writing failed part-way; see its ``restored``.
    """
    plan = plan_patch(patch, resolve)
    try:
        commit_changes(plan.changes, check)
    except EscapesRoot as error:
        raise PatchError(f"{error}; nothing was changed") from error
    return plan


def _add(files: _Files, op: AddFile) -> str:
    path = files.resolve(op.path, op.line)
    kind = files.kind(path)
    if kind not in ("absent", "file"):
        raise PatchError(f"line {op.line}: cannot add {op.path}: {_KIND_WORDS[kind]} is there")
    files.check_parents(path, op.path, op.line)
    new = TextFile.from_content(op.content)
    diff = (
        replaced_file_diff(op.path, files.read(path, op.path, op.line, text=False).lines, new.lines)
        if kind == "file"
        else added_file_diff(op.path, new.lines)
    )
    files.put(path, new, files.mode(path), whole=True)
    return diff


def _delete(files: _Files, op: DeleteFile) -> str:
    path = files.resolve(op.path, op.line)
    kind = files.kind(path)
    if kind == "absent":
        raise PatchError(f"line {op.line}: cannot delete {op.path}: no such file")
    if kind != "file":
        raise PatchError(
            f"line {op.line}: cannot delete {op.path}: it is {_KIND_WORDS[kind]}; "
            "apply_patch deletes files only"
        )
    diff = deleted_file_diff(op.path, files.read(path, op.path, op.line, text=False).lines)
    files.remove(path, whole=True)
    return diff


def _update(files: _Files, op: UpdateFile) -> str:
    path = files.resolve(op.path, op.line)
    kind = files.kind(path)
    if kind != "file":
        what = "no such file" if kind == "absent" else f"it is {_KIND_WORDS[kind]}"
        hint = "; use '*** Add File:' to create it" if kind == "absent" else ""
        raise PatchError(f"line {op.line}: cannot update {op.path}: {what}{hint}")
    before = files.read(path, op.path, op.line)
    placements = place_chunks(before.lines, op.chunks, op.path)
    after = apply_placements(before, placements)
    diff = update_diff(op.path, op.move_to or op.path, before.lines, placements)
    if op.move_to is None:
        files.put(path, after, files.mode(path))
        return diff
    destination = files.resolve(op.move_to, op.line + 1)
    if destination == path:
        files.put(path, after, files.mode(path))
        return diff
    dest_kind = files.kind(destination)
    if dest_kind not in ("absent", "file"):
        raise PatchError(
            f"line {op.line + 1}: cannot move {op.path} to {op.move_to}: "
            f"{_KIND_WORDS[dest_kind]} is there"
        )
    files.check_parents(destination, op.move_to, op.line + 1)
    # A move onto an existing file replaces it whole; the source's hunks matched.
    files.put(destination, after, files.mode(path), whole=True)
    files.remove(path)
    return diff


@dataclass(slots=True)
class _Disk:
    """A path as it was on disk before the patch."""

    kind: _Kind
    data: bytes | None = None
    mode: int | None = None


@dataclass(slots=True)
class _State:
    """A path as the patch has left it so far (None: absent)."""

    text: TextFile | None
    mode: int | None


class _Files:
    """The affected files: their disk state, read once, and their state in the patch."""

    def __init__(self, resolve: PathResolver) -> None:
        self._resolve = resolve
        self._disk: dict[Confined, _Disk] = {}
        self._state: dict[Confined, _State] = {}
        self._whole: set[Confined] = set()
        """Paths replaced or deleted whole (not computed by matching their lines)."""
        self._roots: dict[Path, Beneath] = {}
        self._stack = ExitStack()

    def __enter__(self) -> _Files:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def resolve(self, raw: str, line: int) -> Confined:
        try:
            return self._resolve(raw)
        except Exception as error:  # the resolver's refusal is the message to show
            raise PatchError(f"line {line}: {error}") from error

    def _on_disk(self, path: Confined) -> _Disk:
        disk = self._disk.get(path)
        if disk is None:
            root = self._roots.get(path.root)
            if root is None:
                try:
                    root = self._stack.enter_context(Beneath(path.root))
                except OSError as error:
                    raise PatchError(f"cannot open {path.root}: {error.strerror}") from error
                self._roots[path.root] = root
            disk = _read_disk(root, path)
            self._disk[path] = disk
        return disk

    def kind(self, path: Confined) -> _Kind:
        state = self._state.get(path)
        if state is not None:
            return "file" if state.text is not None else "absent"
        return self._on_disk(path).kind

    def mode(self, path: Confined) -> int | None:
        state = self._state.get(path)
        return state.mode if state is not None else self._on_disk(path).mode

    def read(self, path: Confined, raw: str, line: int, *, text: bool = True) -> TextFile:
        state = self._state.get(path)
        if state is not None and state.text is not None:
            return state.text
        data = self._on_disk(path).data or b""
        if text and b"\x00" in data:
            raise PatchError(f"line {line}: cannot update {raw}: it is a binary file")
        return TextFile.decode(data)

    def put(self, path: Confined, text: TextFile, mode: int | None, *, whole: bool = False) -> None:
        self._on_disk(path)
        self._state[path] = _State(text, mode)
        if whole:
            self._whole.add(path)

    def remove(self, path: Confined, *, whole: bool = False) -> None:
        self._on_disk(path)
        self._state[path] = _State(None, None)
        if whole:
            self._whole.add(path)

    def check_parents(self, path: Confined, raw: str, line: int) -> None:
        """Refuse a new file whose folder would have to replace a file."""
        for parent in path.rel.parents:
            if parent == PurePosixPath("."):
                return
            kind = self.kind(Confined(path.root, parent))
            if kind == "file":
                raise PatchError(f"line {line}: cannot create {raw}: {parent} is a file")
            if kind == "folder":
                return

    def changes(self) -> tuple[FileChange, ...]:
        out: list[FileChange] = []
        for path, state in self._state.items():
            disk = self._disk[path]
            # Changes computed by matching hunks against the file need no prior
            # read; the commit still checks the file holds what they matched.
            anchored = path not in self._whole
            if state.text is None:
                if disk.kind == "file":
                    out.append(FileChange(path, None, disk.data, anchored=anchored))
                continue
            data = state.text.encode()
            if data == disk.data:
                continue
            # The commit writes through a symlink at path to its target (kept
            # beneath the root), as the read above did.
            out.append(FileChange(path, data, disk.data, state.mode, anchored=anchored))
        return tuple(out)


def _read_disk(root: Beneath, path: Confined) -> _Disk:
    try:
        spot = root.locate(path.rel, follow_links=True)
    except (FileNotFoundError, NotADirectoryError):
        return _Disk("absent")
    except IsADirectoryError:
        return _Disk("folder")
    except EscapesRoot as error:
        raise PatchError(f"{path.path} leads outside {path.root}: {error}") from error
    except OSError as error:
        raise PatchError(f"cannot read {path.path}: {error.strerror or error}") from error
    info = spot.stat
    if info is None:
        return _Disk("absent")
    if stat.S_ISDIR(info.st_mode):
        return _Disk("folder")
    if not stat.S_ISREG(info.st_mode):
        return _Disk("other")
    try:
        data = spot.folder.read(spot.name)
    except OSError as error:
        raise PatchError(f"cannot read {path.path}: {error.strerror or error}") from error
    return _Disk("file", data, stat.S_IMODE(info.st_mode))
