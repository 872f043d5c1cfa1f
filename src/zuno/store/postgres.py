"""The PostgreSQL store: one history shared by several workers.

It behaves as the SQLite store does (same records, same order, the same
deferred writes) because it *is* that store's code, run over a connection
that speaks PostgreSQL: every statement, the store's own and those of the
modules that keep their own tables, passes through
:func:`zuno.store.dialect.to_postgres`.

Transactions are explicit (``BEGIN`` ... ``COMMIT`` on an autocommit
connection, so a read never leaves a transaction open). Each one first takes
a transaction-scoped advisory lock: writes are serialized across every worker
of the database, as ``BEGIN IMMEDIATE`` serializes them on a SQLite file, so
read-then-write code (a message's next ``seq``, a todo list's next id) stays
correct with several workers.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, LiteralString, cast

import platformdirs
import psycopg

from zuno.store.dialect import to_postgres
from zuno.store.sqlite import SQLiteStore

if TYPE_CHECKING:
    from zuno.events import Event

__all__ = ["PostgresStore"]

_WRITE_LOCK = 0x7A756E6F  # "zuno": the advisory lock every write transaction holds

_PRIMARY_KEY_SQL = (
    "SELECT a.attname FROM pg_index i JOIN pg_attribute a"
    " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
    " WHERE i.indrelid = %s::regclass AND i.indisprimary"
    " ORDER BY array_position(i.indkey::int2[], a.attnum)"
)


class _Connection:
    """The part of ``sqlite3.Connection`` Zuno uses, over a psycopg connection."""

    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        self._conn = conn
        self._sql: dict[str, str] = {}
        self._keys: dict[str, tuple[str, ...]] = {}

    def _primary_key(self, table: str) -> tuple[str, ...]:
        keys = self._keys.get(table)
        if keys is None:
            rows = self._conn.execute(_PRIMARY_KEY_SQL, (table,)).fetchall()
            keys = self._keys[table] = tuple(str(r[0]) for r in rows)
        return keys

    def _translate(self, sql: str) -> LiteralString:
        text = self._sql.get(sql)
        if text is None:
            text = self._sql[sql] = to_postgres(sql, self._primary_key)
        # The SQL is the codebase's own (values travel as parameters).
        return cast(LiteralString, text)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[tuple[Any, ...]]:
        # Parameters always go with the statement, so ``%%`` is always read as ``%``.
        return self._conn.execute(self._translate(sql), tuple(params))

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(self._translate(sql), [tuple(p) for p in params])

    def close(self) -> None:
        self._conn.close()


class PostgresStore(SQLiteStore):
    """The durable store in a PostgreSQL database (``postgresql://`` connection string)."""

    def __init__(self, dsn: str) -> None:
        # Not SQLiteStore.__init__: there is no file to open.
        self.dsn = dsn
        self._init_state()
        self._conn = _Connection(psycopg.connect(dsn, autocommit=True))
        # The store's code calls sqlite3.Connection methods; _Connection has
        # the ones it calls, translated.
        self._db = cast(sqlite3.Connection, self._conn)
        self._create_schema()

    def _migrate(self, db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE calls ADD COLUMN IF NOT EXISTS runner TEXT")
        db.execute("ALTER TABLE calls ADD COLUMN IF NOT EXISTS reason TEXT")
        # SQLite's implicit rowid: sessions created in the same instant
        # are listed newest first by insertion order.
        db.execute("ALTER TABLE sessions ADD COLUMN IF NOT EXISTS rowid BIGSERIAL")

    def _begin(self) -> None:
        # One database-wide write lock, like SQLite's BEGIN IMMEDIATE: code that
        # reads then writes (next message number, next todo id) stays correct
        # with several workers.
        self._db.execute("BEGIN")
        self._db.execute("SELECT pg_advisory_xact_lock(?)", (_WRITE_LOCK,))

    @property
    def artifacts_root(self) -> Path:
        """``$ZUNO_ARTIFACTS``, else ``artifacts`` in the platform's data folder."""
        env = os.environ.get("ZUNO_ARTIFACTS")
        if env:
            return Path(env)
        return Path(platformdirs.user_data_dir("zuno")) / "artifacts"

    def _insert_event(self, db: sqlite3.Connection, event: Event) -> int:
        row = db.execute(self._EVENT_SQL + " RETURNING seq", self._event_params(event)).fetchone()
        return int(row[0])
