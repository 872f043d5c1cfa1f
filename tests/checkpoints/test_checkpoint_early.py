"""The first file call of a session does not wait for the background first look.

The look (``Checkpoints.prepare``) is held at a gate after its watch started,
so the call certainly arrives while it runs: a file tool's call must finish
with the gate still closed, and once the look ends its row must name a
checkpoint holding the pre-image of what it changed (undo brings it back).
A call that cannot name its paths (``shell``) still waits for the look.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from pg_schema import scratch_schema
from zuno.agent.undo_note import undo_note
from zuno.config.loading import Config
from zuno.dispatch.session_state import SessionState
from zuno.durability.store import CallRecord
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime
from zuno.tools.undo import checkpoint_problem, find_call
from zuno.workspace.checkpoints.store import Checkpoints

pytestmark = pytest.mark.anyio


class Gate:
    """Holds the background look before it reads the workspace, until opened."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.opened = threading.Event()


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    gate = Gate()
    real = Checkpoints._update_index  # pyright: ignore[reportPrivateUsage]

    def held(self: Checkpoints) -> tuple[str, ...]:
        if threading.current_thread().name == "zuno-checkpoints":
            gate.reached.set()
            assert gate.opened.wait(30), "the test never opened the gate"
        return real(self)

    monkeypatch.setattr(Checkpoints, "_update_index", held)
    yield gate
    gate.opened.set()


@pytest.fixture(params=["sqlite", "postgresql"])
def db(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """The store: a SQLite file, or a scratch PostgreSQL schema."""
    if request.param == "sqlite":
        yield tmp_path / "z.db"
        return
    with scratch_schema(tmp_path, monkeypatch) as dsn:
        yield Path(dsn)


def make_runtime(workspace: Path, db: Path) -> Runtime:
    return Runtime(
        workspace, config=Config(tools={"undo": True}), db_path=db, approver=ApproveAll()
    )


def row_of(rt: Runtime, session: SessionState, call_id: str) -> CallRecord:
    (row,) = [r for r in rt.store.calls(session.session_id) if r.call_id == call_id]
    return row


async def start_look(rt: Runtime, session: SessionState, gate: Gate) -> None:
    rt.dispatcher.prepare_checkpoints(session.surface.tools)
    assert await anyio.to_thread.run_sync(gate.reached.wait, 60)


async def end_look(rt: Runtime, gate: Gate) -> None:
    gate.opened.set()
    preparing = rt.dispatcher.checkpoints._preparing  # pyright: ignore[reportPrivateUsage]
    assert preparing is not None
    await anyio.to_thread.run_sync(preparing.join, 60)


async def test_a_write_runs_during_the_look_and_its_checkpoint_follows(
    workspace: Path, tmp_path: Path, gate: Gate
) -> None:
    (workspace / "a.txt").write_text("before\n")
    (workspace / "keep.txt").write_text("untouched\n")
    async with make_runtime(workspace, tmp_path / "z.db") as rt:
        session = rt.open_session()
        read = await rt.call(session, "read", {"path": "a.txt"})
        assert read.outcome.value == "ok"
        await start_look(rt, session, gate)

        wrote = await rt.call(session, "write", {"path": "a.txt", "content": "after\n"})
        created = await rt.call(session, "write", {"path": "new.txt", "content": "new\n"})
        assert wrote.outcome.value == created.outcome.value == "ok"
        # Both finished while the look was held (it gives up after 30 s: then it is over).
        assert rt.dispatcher.checkpoints.looking()
        # The model is told already that the call can be undone; an undo asked now
        # (by another process) is told the checkpoint is coming.
        assert f"zuno undo {wrote.call_id}" in undo_note(rt.store, wrote, "w1", False)
        pending = checkpoint_problem(rt.store, find_call(rt.store, wrote.call_id), workspace)
        assert pending is not None and "waits for the session's first look" in pending
        assert (workspace / "a.txt").read_text() == "after\n"

        await end_look(rt, gate)
        # The row names its checkpoint as soon as the look has written it.
        first = row_of(rt, session, wrote.call_id).snapshot
        await rt.call(session, "write", {"path": "keep.txt", "content": "changed\n"})
        assert first is not None
        checkpoints = rt.dispatcher.checkpoints
        shown = checkpoints._git("show", f"{first}:a.txt")  # pyright: ignore[reportPrivateUsage]
        assert shown == "before\n"
        assert checkpoints._git("show", f"{first}:keep.txt") == "untouched\n"  # pyright: ignore[reportPrivateUsage]
        # The second call's checkpoint holds the first call's write.
        second = row_of(rt, session, created.call_id).snapshot
        assert second is not None
        assert [c.path for c in checkpoints.changes(first, second)] == ["a.txt"]

        undo = await rt.call(session, "undo", {"call": wrote.call_id})
        assert undo.outcome.value == "ok", undo.output
        assert (workspace / "a.txt").read_text() == "before\n"
        assert (workspace / "new.txt").read_text() == "new\n"
    rt.close()


async def test_the_checkpoint_is_recorded_when_the_runtime_closes_first(
    workspace: Path, db: Path, gate: Gate
) -> None:
    (workspace / "a.txt").write_text("before\n")
    async with make_runtime(workspace, db) as rt:
        session = rt.open_session()
        await rt.call(session, "read", {"path": "a.txt"})
        await start_look(rt, session, gate)
        wrote = await rt.call(session, "write", {"path": "a.txt", "content": "after\n"})
        assert rt.dispatcher.checkpoints.looking()
        gate.opened.set()
    rt.close()  # waits for the look, then writes the row's checkpoint
    again = make_runtime(workspace, db)
    try:
        (row,) = [r for r in again.store.calls(session.session_id) if r.call_id == wrote.call_id]
        assert row.snapshot is not None
        shown = again.dispatcher.checkpoints._git("show", f"{row.snapshot}:a.txt")  # pyright: ignore[reportPrivateUsage]
        assert shown == "before\n"
    finally:
        again.close()


async def test_a_shell_call_during_the_look_waits_for_it(
    workspace: Path, tmp_path: Path, gate: Gate
) -> None:
    (workspace / "a.txt").write_text("before\n")
    async with make_runtime(workspace, tmp_path / "z.db") as rt:
        session = rt.open_session()
        await start_look(rt, session, gate)
        done: list[str] = []

        async def shell() -> None:
            result = await rt.call(session, "shell", {"command": "echo after > a.txt"})
            done.append(result.outcome.value)

        async with anyio.create_task_group() as tg:
            tg.start_soon(shell)
            # The shell call cannot start before its checkpoint, which waits for the look.
            await anyio.sleep(0.3)
            assert done == [] and (workspace / "a.txt").read_text() == "before\n"
            gate.opened.set()
        assert done == ["ok"]
        (row,) = [r for r in rt.store.calls(session.session_id) if r.tool == "shell"]
        assert row.snapshot is not None
        shown = rt.dispatcher.checkpoints._git("show", f"{row.snapshot}:a.txt")  # pyright: ignore[reportPrivateUsage]
        assert shown == "before\n"
    rt.close()


async def test_a_write_right_at_session_start_waits_only_for_the_store(
    workspace: Path, tmp_path: Path, gate: Gate
) -> None:
    """Before the look has made its store, a file call waits for that only."""
    (workspace / "a.txt").write_text("before\n")
    async with make_runtime(workspace, tmp_path / "z.db") as rt:
        session = rt.open_session()
        await rt.call(session, "read", {"path": "a.txt"})
        rt.dispatcher.prepare_checkpoints(session.surface.tools)  # not waited for
        wrote = await rt.call(session, "write", {"path": "a.txt", "content": "after\n"})
        assert wrote.outcome.value == "ok"
        assert rt.dispatcher.checkpoints.looking()  # the look is still held at its gate
        await end_look(rt, gate)
    rt.close()
    again = make_runtime(workspace, tmp_path / "z.db")
    try:
        (row,) = [r for r in again.store.calls(session.session_id) if r.call_id == wrote.call_id]
        assert row.snapshot is not None
        shown = again.dispatcher.checkpoints._git("show", f"{row.snapshot}:a.txt")  # pyright: ignore[reportPrivateUsage]
        assert shown == "before\n"
    finally:
        again.close()
