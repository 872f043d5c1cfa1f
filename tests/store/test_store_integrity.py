"""The store under hostile text and failing transactions: never poisoned, never a lost row.

- Text that cannot be encoded (a lone surrogate) never reaches a row as such:
  arguments holding it are ``blocked: invalid_arguments``, a tool name holding it
  is ``blocked: unavailable``, and every row is stored encodable.
- A row that cannot be written is set aside: the rows queued after it are written.
- A transaction that cannot start (the write lock is held elsewhere) or cannot
  commit keeps its queued rows and writes them with the next one: a call that
  ran is never recorded as not run.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from zuno.contract.calls import CallRequest
from zuno.contract.events import Event
from zuno.core.declarations import BlockKind, Outcome
from zuno.durability.store import SQLiteStore
from zuno.durability.store.errors import StoreUnavailable
from zuno.durability.store.records import CallRecord
from zuno.session.runtime import Runtime

SURROGATE = "\ud800"


def _runtime(workspace: Path, store: SQLiteStore) -> Runtime:
    (workspace / "notes.txt").write_text("alpha\n")
    return Runtime(workspace, store=store)


def _all_text(path: Path) -> list[bytes]:
    """Every text value of the store's own tables, as the bytes SQLite holds."""
    db = sqlite3.connect(path)
    db.text_factory = bytes
    values: list[bytes] = []
    for table in ("sessions", "steps", "calls", "events", "meta"):
        for row in db.execute(f"SELECT * FROM {table}"):
            values.extend(v for v in row if isinstance(v, bytes))
    db.close()
    return values


@pytest.mark.parametrize(
    ("tool", "arguments", "kind"),
    [
        ("read", {"path": f"a{SURROGATE}"}, BlockKind.INVALID_ARGUMENTS),
        ("read", {f"pa{SURROGATE}th": "x"}, BlockKind.INVALID_ARGUMENTS),
        ("read", f'{{"path": "{SURROGATE}"}}', BlockKind.INVALID_ARGUMENTS),
        ("read", '{"path": "\\ud800"}', BlockKind.INVALID_ARGUMENTS),
        ("read", f"{SURROGATE} not json", BlockKind.INVALID_ARGUMENTS),
        ("grep", {"pattern": "x", "include": f"*{SURROGATE}"}, BlockKind.INVALID_ARGUMENTS),
        (f"re{SURROGATE}ad", {"path": "notes.txt"}, BlockKind.UNAVAILABLE),
    ],
)
def test_a_lone_surrogate_is_blocked_and_never_poisons_the_store(
    workspace: Path, tmp_path: Path, tool: str, arguments: Any, kind: BlockKind
) -> None:
    path = tmp_path / "s.db"
    rt = _runtime(workspace, SQLiteStore(path))
    session = rt.open_session()

    async def step(requests: list[CallRequest]) -> list[Any]:
        return await rt.dispatch(session, requests)

    (bad,) = anyio.run(step, [CallRequest(tool, arguments)])
    assert (bad.outcome, bad.block_kind) == (Outcome.BLOCKED, kind)
    bad.output.encode("utf-8")  # what the model is shown is valid text too
    if kind is BlockKind.INVALID_ARGUMENTS and "not json" not in str(arguments):
        assert "\\ud800, a lone surrogate" in bad.output  # says what and where
    # Later calls and sessions work: the refused row did not jam the queue.
    (good,) = anyio.run(step, [CallRequest("read", {"path": "notes.txt"})])
    assert good.outcome is Outcome.OK and "alpha" in good.output
    rt.open_session()
    rows = rt.store.calls(session.session_id)
    assert [(r.outcome, r.block_kind) for r in rows] == [
        ("blocked", kind.value),
        ("ok", None),
    ]
    assert "\\ud800" in rows[0].tool + rows[0].arguments  # shown escaped, not dropped
    rt.close()
    for value in _all_text(path):
        value.decode("utf-8")  # strict: every stored byte sequence is valid UTF-8


def _row(call_id: str, **extra: Any) -> CallRecord:
    base: dict[str, Any] = {
        "call_id": call_id,
        "session_id": "s1",
        "step": 1,
        "index": 0,
        "attempt": 1,
        "tool": "read",
        "arguments": "{}",
        "args_hash": "h",
        "effect": None,
        "replay": None,
        "concurrency": None,
        "status": "finished",
        "outcome": "blocked",
        "block_kind": "invalid_arguments",
        "started_at": 1.0,
        "finished_at": 1.0,
    }
    base.update(extra)
    return CallRecord(**base)


def test_text_that_cannot_be_encoded_is_stored_escaped(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store.create_session("s1", "build", str(tmp_path))
    store.record_blocked(
        _row("c1", tool=f"t{SURROGATE}", arguments=f"{{{SURROGATE}"),
        Event("dispatch.blocked", "s1", "c1", {"tool": f"t{SURROGATE}"}),
    )
    (row,) = store.calls("s1")
    assert (row.tool, row.arguments) == ("t\\ud800", "{\\ud800")
    store.close()


def test_a_row_that_cannot_be_written_never_blocks_the_rows_after_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store.create_session("s1", "build", str(tmp_path))
    store.record_blocked(_row("c1"), Event("dispatch.blocked", "s1", "c1", {}))
    store.flush()
    # The same (call_id, attempt) again: this row can never be written.
    store.record_blocked(_row("c1"), Event("dispatch.blocked", "s1", "c1", {"again": True}))
    store.record_blocked(_row("c2", index=1), Event("dispatch.blocked", "s1", "c2", {}))
    assert [c.call_id for c in store.calls("s1")] == ["c1", "c2"]
    assert [e.call_id for e in store.events("s1")] == ["c1", "c1", "c2"]
    store.create_session("s2", "build", str(tmp_path))  # later transactions commit
    assert store.get_session("s2") is not None
    store.close()


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_locked_store_keeps_the_rows_of_a_step_and_writes_them_later(
    workspace: Path, tmp_path: Path
) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path, busy_timeout=0.2)
    rt = _runtime(workspace, store)
    session = rt.open_session()
    other = _hold_write_lock(path)

    async def step() -> list[Any]:
        return await rt.dispatch(
            session,
            [CallRequest("read", {"path": "notes.txt"}), CallRequest("teleport", {})],
        )

    read, blocked = anyio.run(step)
    assert read.outcome is Outcome.OK and "alpha" in read.output, read.output
    assert blocked.block_kind is BlockKind.UNAVAILABLE
    other.execute("ROLLBACK")
    other.close()
    rows = store.calls(session.session_id)
    assert [(r.tool, r.outcome, r.result and r.result[:9]) for r in rows] == [
        ("read", "ok", read.output[:9]),
        ("teleport", "blocked", "Blocked ("),
    ]
    steps = store.query("SELECT step FROM steps WHERE session_id = ?", (session.session_id,))
    assert steps == [(1,)]
    kinds = [e.kind for e in store.events(session.session_id)]
    assert kinds[0] == "dispatch.started" and kinds[-1] == "dispatch.finished"
    assert "call.cancelled" not in kinds
    rt.close()


def test_a_write_that_must_be_durable_fails_loudly_and_keeps_the_queue(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SQLiteStore(path, busy_timeout=0.2)
    store.create_session("s1", "build", str(tmp_path))
    store.record_blocked(_row("c1"), Event("dispatch.blocked", "s1", "c1", {}))
    other = _hold_write_lock(path)
    with pytest.raises(StoreUnavailable, match="locked"):
        store.create_session("s2", "build", str(tmp_path))
    other.execute("ROLLBACK")
    other.close()
    assert [c.call_id for c in store.calls("s1")] == ["c1"]
    assert store.get_session("s2") is None
    store.close()


def test_a_failed_commit_keeps_the_queued_rows_and_the_store_usable(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    store.create_session("s1", "build", str(tmp_path))
    # A module table whose deferred foreign key makes COMMIT itself fail.
    store.ensure_schema(
        [
            "CREATE TABLE parent (id INTEGER PRIMARY KEY)",
            "CREATE TABLE child (pid INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
        ]
    )
    store.query("PRAGMA foreign_keys = ON")
    store.record_blocked(_row("c1"), Event("dispatch.blocked", "s1", "c1", {}))
    with pytest.raises(sqlite3.IntegrityError), store.transaction() as db:
        db.execute("INSERT INTO child (pid) VALUES (42)")
    assert [c.call_id for c in store.calls("s1")] == ["c1"]
    assert store.query("SELECT COUNT(*) FROM child") == [(0,)]
    store.create_session("s2", "build", str(tmp_path))
    assert store.get_session("s2") is not None
    store.close()
