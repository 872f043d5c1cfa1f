"""The PostgreSQL store keeps the same records, in the same order, as the SQLite one."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from zuno.contract.events import Event
from zuno.durability.store import SQLiteStore, open_store
from zuno.durability.store.postgres import PostgresStore
from zuno.durability.store.records import CallRecord


def call(call_id: str, step: int, index: int, status: str = "started") -> CallRecord:
    return CallRecord(
        call_id, "s1", step, index, 1, "read", "{}", "h", "read_only", "safe", "parallel", status
    )


def finished(record: CallRecord, result: str) -> CallRecord:
    record.status, record.outcome, record.result, record.finished_at = "finished", "ok", result, 2.0
    return record


def test_every_public_method_of_the_sqlite_store_is_there() -> None:
    public = {n for n, _ in inspect.getmembers(SQLiteStore) if not n.startswith("_")}
    assert public <= {n for n, _ in inspect.getmembers(PostgresStore) if not n.startswith("_")}


def test_open_store_picks_postgres_from_a_url_a_collapsed_path_or_zuno_db(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    store = open_store(pg_dsn)
    assert isinstance(store, PostgresStore)
    store.create_session("s1", "build", "/w")
    store.close()
    # The CLI's --db is a Path, which collapses "//".
    again = open_store(Path(pg_dsn))
    assert isinstance(again, PostgresStore) and again.find_sessions("s") == ["s1"]
    again.close()
    monkeypatch.setenv("ZUNO_DB", pg_dsn)
    from_env = open_store()
    assert isinstance(from_env, PostgresStore) and from_env.get_session("s1") is not None
    from_env.close()
    assert isinstance(open_store(tmp_path / "z.db"), SQLiteStore)
    assert not isinstance(open_store(tmp_path / "z.db"), PostgresStore)


def test_sessions(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    store.create_session("abc1", "build", "/w", model="m", title="t")
    store.create_session("abd2", "plan", "/w", parent_call_id="c9")
    store.create_session("x_y", "build", "/w")
    got = store.get_session("abc1")
    assert got is not None
    assert (got.agent, got.model, got.title, got.calls) == ("build", "m", "t", 0)
    assert store.get_session("nope") is None
    assert store.find_sessions("ab") == ["abc1", "abd2"]
    assert store.find_sessions("x_") == ["x_y"] and store.find_sessions("a%") == ["abc1", "abd2"]
    assert [s.session_id for s in store.list_sessions()] == ["x_y", "abd2", "abc1"]
    assert [s.session_id for s in store.list_sessions(limit=1)] == ["x_y"]
    store.close()


def test_steps_calls_events_in_order_with_deferred_writes(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    store.create_session("s1", "build", "/w")
    assert store.begin_step("s1", Event("step.started", "s1")) == 1
    # Deferred: a read commits it first.
    assert [e.kind for e in store.events("s1")] == ["step.started"]
    assert store.events("s1")[0].data == {"step": 1}
    a, b = call("a", 1, 1), call("b", 1, 0)
    store.call_started(a, Event("call.started", "s1", "a"))
    store.call_started(b, Event("call.started", "s1", "b"), durable=False)
    assert [c.call_id for c in store.unfinished_calls("s1")] == ["b", "a"]
    store.call_finished(finished(b, "B"), Event("call.finished", "s1", "b"))
    store.call_finished(finished(a, "A"), Event("call.finished", "s1", "a"))
    store.record_blocked(
        CallRecord("c", "s1", 1, 2, 1, "write", "{}", "h", None, None, None, "finished", "blocked"),
        Event("call.blocked", "s1", "c"),
    )
    delivered: list[str] = []
    store.append_events(
        [Event("call.result", "s1", "b"), Event("dispatch.finished", "s1")],
        lambda e: delivered.append(e.kind),
    )
    assert delivered == ["call.result", "dispatch.finished"]
    seq = store.append_event(Event("note", "s1", data={"x": [1, "é"]}))
    events = store.events("s1")
    assert [(e.kind, e.call_id) for e in events] == [
        ("step.started", None),
        ("call.started", "a"),
        ("call.started", "b"),
        ("call.finished", "b"),
        ("call.finished", "a"),
        ("call.blocked", "c"),
        ("call.result", "b"),
        ("dispatch.finished", None),
        ("note", None),
    ]
    assert events[-1].seq == seq and events[-1].data == {"x": [1, "é"]}
    rows = store.calls("s1")
    assert [(c.call_id, c.status, c.outcome, c.result) for c in rows] == [
        ("b", "finished", "ok", "B"),
        ("a", "finished", "ok", "A"),
        ("c", "finished", "blocked", None),
    ]
    assert store.unfinished_calls() == [] and store.unfinished_calls("s1") == []
    session = store.get_session("s1")
    assert session is not None and session.calls == 3
    assert store.begin_step("s1") == 2
    store.close()
    # A new process continues the step count and sees everything committed.
    again = PostgresStore(pg_dsn)
    assert again.begin_step("s1") == 3
    assert len(again.events("s1")) == 9
    again.close()


def test_approvals_messages_and_module_sql(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    store.add_session_approval("s1", "fp", "bash")
    store.add_session_approval("s1", "fp", "bash")
    assert store.has_session_approval("s1", "fp") and not store.has_session_approval("s1", "x")
    assert store.append_message("s1", "user", {"text": "50% done?"}) == 1
    assert store.append_message("s1", "assistant", {"text": "ok"}) == 2
    assert store.messages("s1") == [("user", {"text": "50% done?"}), ("assistant", {"text": "ok"})]
    store.ensure_schema(["CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v REAL NOT NULL)"])
    with store.transaction() as db:
        db.execute("INSERT OR IGNORE INTO kv (k, v) VALUES (?, ?)", ("a", 1.5))
        db.execute("INSERT OR IGNORE INTO kv (k, v) VALUES (?, ?)", ("a", 9.0))
        db.executemany("INSERT INTO kv (k, v) VALUES (?, ?)", [("b", 1796000000.25), ("c", 3)])
        db.execute("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", ("c", 4))
    assert store.query("SELECT k, v FROM kv ORDER BY k") == [
        ("a", 1.5),
        ("b", 1796000000.25),
        ("c", 4.0),
    ]
    store.close()


def test_a_failed_transaction_keeps_the_deferred_writes(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    store.begin_step("s1", Event("step.started", "s1"))
    try:
        with store.transaction() as db:
            db.execute("INSERT INTO no_such_table (a) VALUES (?)", (1,))
    except Exception as exc:
        assert "no_such_table" in str(exc)
    else:
        raise AssertionError("the insert should have failed")
    assert [e.kind for e in store.events("s1")] == ["step.started"]
    store.close()
