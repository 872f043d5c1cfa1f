"""zuno.workspace.patch.commit with a guard: every file is shown to it before any is written."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pytest

from zuno.workspace.beneath import Confined
from zuno.workspace.patch.commit import ChangedMeanwhile, FileChange, commit_changes


class Refused(Exception):
    """The recorder's refusal."""


class Recorder:
    """A guard that refuses one name and remembers what it was shown and told."""

    def __init__(self, refuse: str | None = None) -> None:
        self.refuse = refuse
        self.shown: list[tuple[str, bytes | None]] = []
        self.written: list[tuple[str, bytes | None]] = []
        self.anchored: list[bool] = []

    def verify(
        self,
        path: str | Path,
        info: os.stat_result | None,
        content: Callable[[], bytes],
        shown: str,
        *,
        anchored: bool = False,
    ) -> None:
        self.anchored.append(anchored)
        self.shown.append((Path(path).name, None if info is None else content()))
        if shown == self.refuse:
            raise Refused(shown)

    def wrote(self, path: str | Path, data: bytes | None) -> None:
        self.written.append((Path(path).name, data))


def change(ws: Path, name: str, data: bytes | None, original: bytes | None) -> FileChange:
    return FileChange(Confined(ws, PurePosixPath(name)), data, original)


def test_the_guard_sees_every_file_before_any_is_written(workspace: Path) -> None:
    (workspace / "a").write_bytes(b"a\n")
    (workspace / "b").write_bytes(b"b\n")
    guard = Recorder(refuse="b")
    changes = [
        change(workspace, "a", b"A\n", b"a\n"),
        change(workspace, "b", None, b"b\n"),
        change(workspace, "c", b"C\n", None),
    ]

    with pytest.raises(Refused):
        commit_changes(changes, None, guard)

    assert guard.shown == [("a", b"a\n"), ("b", b"b\n")]
    assert guard.written == []
    assert (workspace / "a").read_bytes() == b"a\n"
    assert (workspace / "b").read_bytes() == b"b\n"
    assert not (workspace / "c").exists()
    assert sorted(p.name for p in workspace.iterdir()) == ["a", "b"]  # no temporaries


def test_a_file_changed_since_its_change_was_computed_is_not_written(workspace: Path) -> None:
    (workspace / "a").write_bytes(b"changed\n")
    guard = Recorder()

    with pytest.raises(ChangedMeanwhile, match="a changed while the change was being prepared"):
        commit_changes([change(workspace, "a", b"new\n", b"old\n")], None, guard)

    assert (workspace / "a").read_bytes() == b"changed\n"
    assert guard.written == []


def test_the_guard_hears_what_was_written_and_deleted(workspace: Path) -> None:
    (workspace / "a").write_bytes(b"a\n")
    (workspace / "b").write_bytes(b"b\n")
    guard = Recorder()

    commit_changes(
        [change(workspace, "a", b"A\n", b"a\n"), change(workspace, "b", None, b"b\n")],
        None,
        guard,
    )

    assert guard.written == [("a", b"A\n"), ("b", None)]
    assert (workspace / "a").read_bytes() == b"A\n"
    assert not (workspace / "b").exists()
