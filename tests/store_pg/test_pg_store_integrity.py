"""The PostgreSQL store under hostile text, a failing row, a newer schema and a dead server."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import psycopg
import pytest

from zuno.contract.events import Event
from zuno.durability.store import StoreUnavailable, StoreVersionError, open_store
from zuno.durability.store.postgres import PostgresStore
from zuno.durability.store.records import CallRecord
from zuno.durability.store.schema import SCHEMA_VERSION


def _row(call_id: str, index: int = 0, **extra: Any) -> CallRecord:
    record = CallRecord(call_id, "s1", 1, index, 1, "read", "{}", "h", None, None, None, "finished")
    record.outcome, record.block_kind = "blocked", "invalid_arguments"
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_unencodable_text_and_nul_are_stored_escaped(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    store.create_session("s1", "build", "/w")
    store.record_blocked(
        _row("c1", tool="t\ud800", arguments='{"a": "x\x00y"}', result="r\x00\udcff"),
        Event("dispatch.blocked", "s1", "c1", {"tool": "t\ud800"}),
    )
    (row,) = store.calls("s1")
    assert (row.tool, row.arguments, row.result) == (
        "t\\ud800",
        '{"a": "x\\x00y"}',
        "r\\x00\\udcff",
    )
    store.close()


def test_a_row_that_cannot_be_written_never_blocks_the_rows_after_it(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    store.create_session("s1", "build", "/w")
    store.record_blocked(_row("c1"), Event("dispatch.blocked", "s1", "c1", {}))
    store.flush()
    store.record_blocked(_row("c1"), Event("dispatch.blocked", "s1", "c1", {"again": True}))
    store.record_blocked(_row("c2", 1), Event("dispatch.blocked", "s1", "c2", {}))
    assert [c.call_id for c in store.calls("s1")] == ["c1", "c2"]
    store.create_session("s2", "build", "/w")
    assert store.get_session("s2") is not None
    store.close()


def _layout(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() ORDER BY 1, 2"
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() ORDER BY 1"
        ).fetchall()
        meta = conn.execute("SELECT key, value FROM meta ORDER BY 1").fetchall()
    return [*columns, *indexes, *meta]


@pytest.mark.parametrize("migrate", [True, False])
def test_a_newer_store_is_refused_and_left_untouched(pg_dsn: str, migrate: bool) -> None:
    PostgresStore(pg_dsn).close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE meta SET value = %s", (str(SCHEMA_VERSION + 1),))
        conn.execute("CREATE INDEX calls_started ON calls (status)")
        conn.execute("ALTER TABLE calls DROP COLUMN reason")
    before = _layout(pg_dsn)
    with pytest.raises(StoreVersionError, match=f"schema version {SCHEMA_VERSION + 1}"):
        open_store(pg_dsn, migrate=migrate)
    assert _layout(pg_dsn) == before


def test_a_reading_open_reads_an_older_store_without_migrating_it(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    store.create_session("s1", "build", "/w")
    store.record_blocked(_row("c1"), Event("dispatch.blocked", "s1", "c1", {}))
    store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE calls DROP COLUMN reason")
        conn.execute("DELETE FROM meta")
    before = _layout(pg_dsn)
    reader = open_store(pg_dsn, migrate=False)
    assert reader.migration_needed and "calls.reason" in reader.migration_needed
    assert [c.call_id for c in reader.calls("s1")] == ["c1"]
    reader.close()
    assert _layout(pg_dsn) == before


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_server_is_one_line_without_the_password(tmp_path: Path) -> None:
    dsn = f"postgresql://zuno:s3cret@127.0.0.1:{_free_port()}/zuno?connect_timeout=5"
    with pytest.raises(StoreUnavailable) as caught:
        open_store(dsn)
    message = str(caught.value)
    assert "\n" not in message and "s3cret" not in message
    assert "cannot use PostgreSQL at postgresql://zuno@127.0.0.1:" in message
    assert "check that the server runs" in message


def test_a_failed_commit_keeps_the_queued_rows_and_the_store_usable(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    store.create_session("s1", "build", "/w")
    store.ensure_schema(
        [
            "CREATE TABLE parent (id INTEGER PRIMARY KEY)",
            "CREATE TABLE child (pid INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)",
        ]
    )
    store.record_blocked(_row("c1"), Event("dispatch.blocked", "s1", "c1", {}))
    with pytest.raises(psycopg.IntegrityError), store.transaction() as db:
        db.execute("INSERT INTO child (pid) VALUES (42)")
    assert [c.call_id for c in store.calls("s1")] == ["c1"]
    assert store.query("SELECT COUNT(*) FROM child") == [(0,)]
    store.create_session("s2", "build", "/w")
    assert store.get_session("s2") is not None
    store.close()
