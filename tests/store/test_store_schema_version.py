"""``meta.schema_version`` is read: a newer store is refused, a reading open never migrates."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from zuno.contract.events import Event
from zuno.durability.store import SQLiteStore, StoreVersionError, open_store
from zuno.durability.store.records import CallRecord
from zuno.durability.store.schema import SCHEMA_VERSION


def _layout(path: Path) -> list[tuple[str, str, str]]:
    """Every table, index and column of the file, to compare before and after."""
    db = sqlite3.connect(path)
    objects = db.execute("SELECT type, name, COALESCE(sql, '') FROM sqlite_master").fetchall()
    columns = [
        ("column", table, ",".join(r[1] for r in db.execute(f"PRAGMA table_info({table})")))
        for (kind, table, _) in objects
        if kind == "table"
    ]
    version = db.execute("SELECT value FROM meta").fetchall()
    db.close()
    return sorted([*objects, *columns, ("meta", "version", repr(version))])


def _store_with_a_call(path: Path) -> None:
    store = SQLiteStore(path)
    store.create_session("s1", "build", "/w")
    store.call_started(
        CallRecord(
            "c1", "s1", 1, 0, 1, "read", "{}", "h", "read_only", "safe", "parallel", "started"
        ),
        Event("call.started", "s1", "c1", {}),
    )
    store.close()


def _as_newer(path: Path, version: int = SCHEMA_VERSION + 1) -> None:
    """What a newer Zuno might leave: its version, an index of its own, a dropped column."""
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(version),))
        db.execute("CREATE INDEX calls_started ON calls (status)")
        db.execute("ALTER TABLE calls DROP COLUMN reason")


@pytest.mark.parametrize("migrate", [True, False])
def test_a_newer_store_is_refused_and_left_untouched(tmp_path: Path, migrate: bool) -> None:
    path = tmp_path / "s.db"
    _store_with_a_call(path)
    _as_newer(path)
    before = _layout(path)
    with pytest.raises(StoreVersionError) as caught:
        open_store(path, migrate=migrate)
    message = str(caught.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert f"supports version {SCHEMA_VERSION}" in message and "upgrade Zuno" in message
    assert "\n" not in message
    assert _layout(path) == before  # no index dropped, no column added


def _as_older(path: Path) -> None:
    """A store of an earlier Zuno: no runner/reason columns, the old status index."""
    with sqlite3.connect(path) as db:
        db.execute("ALTER TABLE calls DROP COLUMN reason")
        db.execute("ALTER TABLE calls DROP COLUMN runner")
        db.execute("CREATE INDEX calls_started ON calls (status)")
        db.execute("DELETE FROM meta")


def test_a_reading_open_reads_an_older_store_without_migrating_it(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _store_with_a_call(path)
    _as_older(path)
    before = _layout(path)
    store = open_store(path, migrate=False)
    assert store.migration_needed and "calls.runner" in store.migration_needed
    (session,) = store.list_sessions()
    assert session.session_id == "s1" and session.calls == 1
    (call,) = store.calls("s1")
    assert (call.call_id, call.runner, call.reason) == ("c1", None, None)
    store.close()
    assert _layout(path) == before
    # A writing open upgrades it, and records the version.
    open_store(path).close()
    after = _layout(path)
    assert ("meta", "version", repr([(str(SCHEMA_VERSION),)])) in after
    assert any(kind == "column" and "reason" in cols for kind, _, cols in after)


def test_a_reading_open_of_a_current_store_runs_no_schema_statement(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _store_with_a_call(path)
    with sqlite3.connect(path) as db:  # a marker any schema statement of the open would drop
        db.execute("CREATE INDEX calls_started ON calls (status)")
    before = _layout(path)
    store = open_store(path, migrate=False)
    assert store.migration_needed is None and store.get_session("s1") is not None
    store.close()
    assert _layout(path) == before


def test_a_reading_open_creates_no_file(tmp_path: Path) -> None:
    path = tmp_path / "nothing" / "here.db"
    store = open_store(path, migrate=False)
    assert store.list_sessions() == [] and store.get_session("x") is None
    store.close()
    assert not path.exists() and not path.parent.exists()
