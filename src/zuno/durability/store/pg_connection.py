"""The PostgreSQL store's connection: opened, measured, and replaced when the server drops it.

A connection the server dropped is replaced before the next transaction (a
few tries, with backoff); a read outside a transaction is retried once on the
new connection. Errors carry the first cause (why the connection was lost),
never a later one. Opening a connection also reads the tables' primary keys
(for the rewriting of ``INSERT OR REPLACE``) and the server's clock, which
every lease compares.
"""

from __future__ import annotations

import os
import socket
import time
from contextlib import suppress
from typing import Any, LiteralString

import psycopg
from psycopg.conninfo import make_conninfo

from zuno.durability.store.dialect import NOW_SQL
from zuno.durability.store.errors import StoreUnavailable
from zuno.durability.store.pg_dialect import PostgresDialect, connection_loss, first_line
from zuno.durability.store.pg_settings import connection_settings, describe_dsn
from zuno.durability.store.transcript import SQLStore

__all__ = ["PgConnection", "PgCursor", "PostgresConnections"]

PgCursor = psycopg.Cursor[tuple[Any, ...]]
"""A psycopg cursor of plain tuples."""
PgConnection = psycopg.Connection[tuple[Any, ...]]
"""A psycopg connection of plain tuples."""


_RECONNECT_TRIES = 6
"""Connection attempts after a drop; the waits between them double from
:data:`_FIRST_BACKOFF` (0.05 s ... 1.6 s: about 3 s in all)."""
_FIRST_BACKOFF = 0.05

_PRIMARY_KEYS_SQL = (
    "SELECT c.relname, a.attname FROM pg_index i"
    " JOIN pg_class c ON c.oid = i.indrelid"
    " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
    " WHERE i.indisprimary AND c.relnamespace = current_schema()::regnamespace"
    " ORDER BY c.relname, array_position(i.indkey::int2[], a.attnum)"
)

_READ_VERBS = ("SELECT", "WITH", "SHOW")


class PostgresConnections(SQLStore):
    """The store's side of its PostgreSQL connection (the rest is the pipelined transactions)."""

    def _init_connection(self, dsn: str) -> None:
        """The connection's state; nothing is connected yet."""
        self.dsn = dsn
        self.busy_timeout = 0.0
        self.dialect = PostgresDialect()
        self.single_host = self.dialect.single_host
        self._pg: PgConnection | None = None
        self._lost_because: BaseException | None = None
        """Why the last connection was lost, until a new one opens (errors name it first)."""
        self._keys: dict[str, tuple[str, ...]] = {}
        self._session_sql: list[LiteralString] = []

    @property
    def connection(self) -> PgConnection:
        """The current psycopg connection (for diagnostics, such as libpq's trace).

        Replaced when the server drops it; do not run statements on it.
        """
        if self._pg is None or self._pg.closed:
            self._reconnect(None)
        assert self._pg is not None
        return self._pg

    # Connections -------------------------------------------------------------

    def _open_connection(self) -> None:
        conn = psycopg.connect(
            make_conninfo(self.dsn, **connection_settings(self.dsn)), autocommit=True
        )
        try:
            for statement in self._session_sql:
                conn.execute(statement)
            rows = conn.execute(_PRIMARY_KEYS_SQL).fetchall()
            # The clock every rule compares: this machine's may differ from the server's.
            sent = time.time()
            now = conn.execute(f"SELECT {NOW_SQL}").fetchone()
            received = time.time()
        except BaseException:
            with suppress(Exception):
                conn.close()
            raise
        keys: dict[str, list[str]] = {}
        for table, column in rows:
            keys.setdefault(str(table), []).append(str(column))
        if now is not None:
            self.note_clock(float(now[0]), sent, received)
        self._keys.update({t: tuple(c) for t, c in keys.items()})
        self._pg = conn

    def _reconnect(self, cause: BaseException | None) -> None:
        """Replace a dropped connection, trying a few times with backoff.

        Raises:
            StoreUnavailable: The server could not be reached (naming ``cause``, or
                the loss seen earlier, first).
        """
        if cause is not None:
            self._lost_because = cause
        cause = self._lost_because
        self._disconnect()
        wait = _FIRST_BACKOFF
        last: psycopg.Error | None = None
        for attempt in range(_RECONNECT_TRIES):
            if attempt:
                time.sleep(wait)
                wait *= 2
            try:
                self._open_connection()
                self._lost_because = None
                return
            except psycopg.Error as exc:
                last = exc
        lost = f"the connection was lost ({first_line(cause)}) and " if cause else ""
        raise StoreUnavailable(
            f"cannot use PostgreSQL at {self._where()}: {lost}{_RECONNECT_TRIES} attempts "
            f"to connect failed ({first_line(last) if last else 'no answer'}): check that "
            "the server runs and accepts this connection string (--db or ZUNO_DB)"
        ) from (cause or last)

    def interrupt(self) -> None:
        """Break the connection under a transaction stuck on a dead peer (from another thread).

        The socket is shut down: the statement waiting on it fails at once, and
        the next transaction connects again.
        """
        conn = self._pg
        if conn is None or conn.closed:
            return
        with suppress(Exception):  # already closed, or the fd went away
            fd = conn.pgconn.socket
            sock = socket.socket(fileno=os.dup(fd))
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.close()

    def _disconnect(self) -> None:
        conn, self._pg = self._pg, None
        if conn is not None:
            with suppress(Exception):  # a connection the server already dropped
                conn.close()

    def _dropped(self, conn: PgConnection | None = None) -> bool:
        conn = conn or self._pg
        return conn is None or conn.closed or conn.broken

    def _live(self) -> PgConnection:
        if self._dropped():
            self._reconnect(None)
        assert self._pg is not None
        return self._pg

    def _autocommit(self, text: LiteralString, params: tuple[Any, ...]) -> PgCursor:
        """One statement outside a transaction; a read is retried once on a new connection."""
        conn = self._live()
        try:
            return conn.execute(text, params)
        except psycopg.Error as exc:
            if not self._dropped(conn) and connection_loss(exc) is None:
                raise
            self._reconnect(self._lost_because or connection_loss(exc) or exc)
            if not text.lstrip().upper().startswith(_READ_VERBS):
                raise StoreUnavailable(
                    f"the connection to PostgreSQL at {self._where()} was lost "
                    f"({first_line(exc)}); it is connected again: retry"
                ) from exc
            assert self._pg is not None
            return self._pg.execute(text, params)

    def _refresh_keys(self) -> None:
        rows = self._autocommit(_PRIMARY_KEYS_SQL, ()).fetchall()
        keys: dict[str, list[str]] = {}
        for table, column in rows:
            keys.setdefault(str(table), []).append(str(column))
        self._keys.update({t: tuple(c) for t, c in keys.items()})

    def _where(self) -> str:
        """The server and database, without the password."""
        return describe_dsn(self.dsn)
