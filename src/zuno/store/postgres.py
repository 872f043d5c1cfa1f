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

Every string is bound through :func:`zuno.store.storable.storable_params`,
which here also escapes NUL (PostgreSQL's text cannot hold it). A server that
cannot be reached is one :class:`~zuno.store.errors.StoreUnavailable` naming
the server (never the password).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, LiteralString, cast

import platformdirs
import psycopg
from psycopg.conninfo import conninfo_to_dict

from zuno.store.dialect import to_postgres
from zuno.store.errors import StoreError, StoreUnavailable
from zuno.store.sqlite import SQLiteStore
from zuno.store.storable import storable_params

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
        return self._conn.execute(self._translate(sql), tuple(storable_params(params, nul=True)))

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(
                self._translate(sql), [tuple(storable_params(p, nul=True)) for p in params]
            )

    def close(self) -> None:
        self._conn.close()


class PostgresStore(SQLiteStore):
    """The durable store in a PostgreSQL database (``postgresql://`` connection string)."""

    def __init__(self, dsn: str, *, migrate: bool = True) -> None:
        # Not SQLiteStore.__init__: there is no file to open.
        self.dsn = dsn
        self.busy_timeout = 0.0
        self._init_state()
        try:
            self._conn = _Connection(psycopg.connect(dsn, autocommit=True))
        except psycopg.Error as exc:
            raise StoreUnavailable(self._problem(exc)) from exc
        # The store's code calls sqlite3.Connection methods; _Connection has
        # the ones it calls, translated.
        self._db = cast(sqlite3.Connection, self._conn)
        try:
            if migrate:
                self._create_schema()
            else:
                self._open_for_reading()
        except psycopg.Error as exc:
            self._close_quietly()
            raise StoreUnavailable(self._problem(exc)) from exc
        except StoreError:
            self._close_quietly()
            raise

    def _open_for_reading(self) -> None:
        if not self._tables(self._db):
            raise StoreUnavailable(
                f"{self._where()} holds no Zuno store yet (nothing was recorded there): "
                "a writing command (zuno call, zuno run) creates it"
            )
        if self._inspect() is not None:
            # Read what is there; an upgrade is for a writing command.
            self._db.execute("SET default_transaction_read_only = on")

    def _tables(self, db: sqlite3.Connection) -> set[str]:
        rows = db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchall()
        return {str(r[0]) for r in rows}

    def _columns(self, db: sqlite3.Connection, table: str) -> set[str]:
        rows = db.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        ).fetchall()
        return {str(r[0]) for r in rows}

    def _migrate(self, db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE calls ADD COLUMN IF NOT EXISTS runner TEXT")
        db.execute("ALTER TABLE calls ADD COLUMN IF NOT EXISTS reason TEXT")
        # SQLite's implicit rowid: sessions created in the same instant
        # are listed newest first by insertion order.
        db.execute("ALTER TABLE sessions ADD COLUMN IF NOT EXISTS rowid BIGSERIAL")

    def _where(self) -> str:
        """The server and database, without the password."""
        try:
            info = conninfo_to_dict(self.dsn)
        except psycopg.Error:
            return "the PostgreSQL server of --db (or ZUNO_DB)"
        user = f"{info['user']}@" if info.get("user") else ""
        port = f":{info['port']}" if info.get("port") else ""
        return (
            f"postgresql://{user}{info.get('host') or 'localhost'}{port}/{info.get('dbname', '')}"
        )

    def _problem(self, exc: Exception) -> str:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if isinstance(exc, psycopg.OperationalError):
            return (
                f"cannot use PostgreSQL at {self._where()} ({first}): check that the server "
                "runs and accepts this connection string (--db or ZUNO_DB)"
            )
        if isinstance(exc, psycopg.ProgrammingError) and "dsn" in first.lower():
            return f"the PostgreSQL connection string is not valid ({first}): check --db or ZUNO_DB"
        return f"the store {self._where()} failed ({type(exc).__name__}: {first})"

    def _transient(self, exc: BaseException) -> bool:
        return isinstance(exc, StoreError | psycopg.OperationalError | psycopg.InterfaceError)

    def _begin(self) -> None:
        # One database-wide write lock, like SQLite's BEGIN IMMEDIATE: code that
        # reads then writes (next message number, next todo id) stays correct
        # with several workers.
        self._db.execute("BEGIN")
        try:
            self._db.execute("SELECT pg_advisory_xact_lock(?)", (_WRITE_LOCK,))
        except BaseException:
            self._rollback()
            raise

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
