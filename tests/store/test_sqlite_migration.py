"""A store file made before a column existed is upgraded in place, its rows kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from zuno.contract.events import Event
from zuno.durability.store import SQLiteStore
from zuno.durability.store.records import CallRecord


def _call(call_id: str, **extra: object) -> CallRecord:
    return CallRecord(
        call_id=call_id,
        session_id="s1",
        step=1,
        index=0,
        attempt=1,
        tool="shell",
        arguments="{}",
        args_hash="h",
        effect="side_effecting",
        replay="never",
        concurrency="exclusive",
        status="started",
        started_at=1.0,
        **extra,  # type: ignore[arg-type]
    )


def test_a_store_without_the_runner_and_reason_columns_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SQLiteStore(path)
    store.create_session("s1", "build", str(tmp_path))
    store.call_started(_call("old"), Event("call.started", "s1", "old", {}))
    store.close()
    with sqlite3.connect(path) as db:  # as a store of an earlier version left it
        db.execute("ALTER TABLE calls DROP COLUMN reason")
        db.execute("ALTER TABLE calls DROP COLUMN runner")

    store = SQLiteStore(path)
    (old,) = store.calls("s1")
    assert old.call_id == "old" and old.runner is None and old.reason is None
    new = _call("new", runner="1:2")
    store.call_started(new, Event("call.started", "s1", "new", {}))
    new.status, new.outcome, new.reason = "finished", "uncertain", "timed out after 1 s"
    store.call_finished(new, Event("call.finished", "s1", "new", {}))
    rows = {c.call_id: c for c in store.calls("s1")}
    assert rows["new"].reason == "timed out after 1 s" and rows["new"].runner == "1:2"
    store.close()
