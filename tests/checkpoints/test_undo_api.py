"""Checkpoints and undo through the Python API: a real Runtime, SQLite file, git and shell.

Each test judges by the bytes on disk and the rows in the store, never by the
tool's own words.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from zuno.config.loading import Config
from zuno.contract.calls import CallResult
from zuno.dispatch.session_state import SessionState
from zuno.durability.store import CallRecord
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


def make_runtime(workspace: Path, db: Path) -> Runtime:
    return Runtime(
        workspace, config=Config(tools={"undo": True}), db_path=db, approver=ApproveAll()
    )


def row_of(rt: Runtime, session: SessionState, call_id: str) -> CallRecord:
    (row,) = [r for r in rt.store.calls(session.session_id) if r.call_id == call_id]
    return row


async def shell(rt: Runtime, session: SessionState, command: str) -> CallResult:
    result = await rt.call(session, "shell", {"command": command})
    assert result.outcome.value == "ok", result.output
    return result


def tree(root: Path) -> dict[str, tuple[str, bytes | str, bool]]:
    """Every file and symlink under root (``.git`` aside): kind, content or target, exec bit."""
    found: dict[str, tuple[str, bytes | str, bool]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git" and not os.path.islink(Path(folder, d))]
        for name in files + [d for d in os.listdir(folder) if os.path.islink(Path(folder, d))]:
            p = Path(folder, name)
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                found[rel] = ("link", os.readlink(p), False)
            else:
                found[rel] = ("file", p.read_bytes(), bool(p.stat().st_mode & stat.S_IXUSR))
    return found


async def test_a_shell_effect_is_undone_and_the_undo_can_be_undone(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "a.txt").write_bytes(b"first\r\n\x00binary")
    (workspace / "gone.txt").write_text("keep me\n")
    (workspace / "link").symlink_to("a.txt")
    before = tree(workspace)
    async with make_runtime(workspace, tmp_path / "z.db") as rt:
        session = rt.open_session()
        read = await rt.call(session, "read", {"path": "a.txt"})
        done = await shell(
            rt,
            session,
            "printf changed > a.txt; rm gone.txt; mkdir -p new/deep; echo x > new/deep/x; "
            "chmod +x new/deep/x; rm link; ln -s gone.txt link",
        )
        after_shell = tree(workspace)
        assert after_shell != before
        shell_row = row_of(rt, session, done.call_id)
        assert shell_row.snapshot is not None  # the checkpoint is in the call's row
        assert row_of(rt, session, read.call_id).snapshot is None  # read-only: none

        undo = await rt.call(session, "undo", {"call": done.call_id})
        assert undo.outcome.value == "ok", undo.output
        assert tree(workspace) == before
        assert not (workspace / "new").exists()  # the folders it made are gone too
        undo_row = row_of(rt, session, undo.call_id)
        assert (undo_row.effect, undo_row.replay, undo_row.concurrency) == (
            "side_effecting",
            "never",
            "exclusive",
        )
        assert undo_row.snapshot is not None and undo_row.snapshot != shell_row.snapshot

        again = await rt.call(session, "undo", {"call": undo.call_id})
        assert again.outcome.value == "ok", again.output
        assert tree(workspace) == after_shell
    rt.close()


async def test_a_file_changed_again_later_is_refused_unless_forced(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "a.txt").write_text("one\n")
    async with make_runtime(workspace, tmp_path / "z.db") as rt:
        session = rt.open_session()
        first = await shell(rt, session, "echo two > a.txt; echo b > b.txt")
        await shell(rt, session, "echo three > a.txt")

        refused = await rt.call(session, "undo", {"call": first.call_id})
        assert (refused.outcome.value, refused.block_kind and refused.block_kind.value) == (
            "blocked",
            "invalid_arguments",
        )
        assert "a.txt" in refused.output
        assert (workspace / "a.txt").read_text() == "three\n"  # nothing was changed
        assert (workspace / "b.txt").exists()

        forced = await rt.call(session, "undo", {"call": first.call_id, "force": True})
        assert forced.outcome.value == "ok", forced.output
        assert (workspace / "a.txt").read_text() == "one\n"
        assert not (workspace / "b.txt").exists()
    rt.close()


async def test_undo_to_restores_the_whole_workspace_before_that_call(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "a.txt").write_text("one\n")
    async with make_runtime(workspace, tmp_path / "z.db") as rt:
        session = rt.open_session()
        first = await shell(rt, session, "echo two > a.txt")
        await shell(rt, session, "echo three > a.txt; echo c > c.txt")
        (workspace / "by-hand.txt").write_text("typed by a person\n")

        result = await rt.call(session, "undo", {"call": first.call_id, "scope": "to"})
        assert result.outcome.value == "ok", result.output
        assert tree(workspace) == {"a.txt": ("file", b"one\n", False)}
        # Nothing is lost: undoing that undo brings every later change back.
        back = await rt.call(session, "undo", {"call": result.call_id})
        assert back.outcome.value == "ok", back.output
        assert (workspace / "by-hand.txt").read_text() == "typed by a person\n"
        assert (workspace / "c.txt").read_text() == "c\n"
    rt.close()


async def test_a_failed_checkpoint_is_recorded_and_the_call_still_runs(
    workspace: Path, tmp_path: Path
) -> None:
    db = tmp_path / "z.db"
    (tmp_path / "z-artifacts").mkdir()
    (tmp_path / "z-artifacts" / "checkpoints").write_text("a file where the folder goes\n")
    async with make_runtime(workspace, db) as rt:
        session = rt.open_session()
        done = await shell(rt, session, "echo made > made.txt")
        assert (workspace / "made.txt").read_text() == "made\n"  # the call ran
        assert row_of(rt, session, done.call_id).snapshot is None
        failed = [e for e in rt.store.events(session.session_id) if e.kind == "checkpoint.failed"]
        assert [e.call_id for e in failed] == [done.call_id]
        assert "checkpoint store" in json.dumps(failed[0].data)

        undo = await rt.call(session, "undo", {"call": done.call_id})
        assert undo.outcome.value == "blocked"
        assert (workspace / "made.txt").exists()
    rt.close()


async def test_checkpoints_can_be_switched_off(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZUNO_CHECKPOINTS", "off")
    async with make_runtime(workspace, tmp_path / "z.db") as rt:
        session = rt.open_session()
        done = await shell(rt, session, "echo made > made.txt")
        assert row_of(rt, session, done.call_id).snapshot is None
        undo = await rt.call(session, "undo", {"call": done.call_id})
        assert undo.outcome.value == "blocked"  # its own checkpoint could not be taken
        assert (workspace / "made.txt").exists()
    assert not (tmp_path / "z-artifacts" / "checkpoints").exists()
    rt.close()
