"""The PostgreSQL store: one history shared by many workers, on many machines.

It keeps the SQLite store's records and rules (it runs that store's code, each
statement rewritten by :func:`zuno.durability.store.dialect.to_postgres`), with
transactions built for a server:

- **Isolation.** Every transaction is ``BEGIN ISOLATION LEVEL READ
  COMMITTED``, whatever the database's default, so each statement sees what
  other workers committed before it. There is no global lock: workers in
  different sessions never wait for each other. Where the store reads then
  writes within a session (a message's next number), it first locks that
  session's row (``SELECT ... FOR UPDATE``).
- **Round trips.** A transaction is one pipeline: ``BEGIN``, its commit token,
  the queued rows, the caller's statements and ``COMMIT`` travel together and
  their answers come back together. A statement whose rows the caller reads
  costs one more round trip (the rows must arrive before the code goes on).
  psycopg prepares the statements a connection runs often.
- **Dropped connections.** A connection the server dropped is replaced before
  the next transaction (a few tries, with backoff); a read outside a
  transaction is retried once on the new connection. Errors carry the first
  cause (why the connection was lost), never a failing ``ROLLBACK``'s.
- **At most once.** Every write transaction also upserts its commit token: a
  row of ``store_commits`` per open store, holding the number of its last
  transaction. When the connection is lost after ``COMMIT`` may have reached
  the server, the store reconnects and reads that row: either the commit
  landed (its queued rows are forgotten, never written twice) or it did not
  (they are written again; the caller's own statements are replayed when it
  read nothing from them, otherwise the caller gets
  :class:`~zuno.durability.store.errors.StoreUnavailable`: a call whose ``started`` row
  is not confirmed is not run). When the server cannot be asked, the question
  waits for the next transaction, which asks it first.
- **A row that can never be written** (a constraint it breaks) is found by
  which statement the server refused; it is set aside as on SQLite and the
  transaction is written again without it.

Every string is bound through :func:`zuno.durability.store.storable.storable_params`,
which here also escapes NUL (PostgreSQL's text cannot hold it). A server that
cannot be reached is one :class:`~zuno.durability.store.errors.StoreUnavailable` naming
the server (never the password).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import time
import uuid
from collections.abc import Generator, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, LiteralString, NoReturn, cast

import platformdirs
import psycopg
from psycopg.conninfo import make_conninfo

from zuno.durability.store.dialect import NOW_SQL, to_postgres
from zuno.durability.store.errors import SessionBusy, StoreError, StoreUnavailable
from zuno.durability.store.pg_settings import connection_settings, describe_dsn
from zuno.durability.store.schema import CALL_FIELDS
from zuno.durability.store.sqlite import _OWNER_FENCE, SQLiteStore  # pyright: ignore[reportPrivateUsage]
from zuno.durability.store.storable import storable_params

if TYPE_CHECKING:
    from collections.abc import Callable

    from zuno.contract.events import Event
    from zuno.durability.store.records import CallRecord, SessionRecord

__all__ = ["PostgresStore"]

_Cursor = psycopg.Cursor[tuple[Any, ...]]
_PgConnection = psycopg.Connection[tuple[Any, ...]]

_RECONNECT_TRIES = 6
"""Connection attempts after a drop; the waits between them double from
:data:`_FIRST_BACKOFF` (0.05 s ... 1.6 s: about 3 s in all)."""
_FIRST_BACKOFF = 0.05
_COMMIT_TRIES = 3
"""Times a transaction is written again after a commit that did not land."""

_SCHEMA_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('zuno-schema:' || current_schema()))"
"""Held by transactions that change the schema: two workers creating the same
table at once would otherwise collide in PostgreSQL's catalog. Writes of rows
never take it."""

_PRIMARY_KEYS_SQL = (
    "SELECT c.relname, a.attname FROM pg_index i"
    " JOIN pg_class c ON c.oid = i.indrelid"
    " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
    " WHERE i.indisprimary AND c.relnamespace = current_schema()::regnamespace"
    " ORDER BY c.relname, array_position(i.indkey::int2[], a.attnum)"
)

_COMMITS_TABLE = (
    "CREATE TABLE IF NOT EXISTS store_commits ("
    " store TEXT PRIMARY KEY, seq BIGINT NOT NULL, at DOUBLE PRECISION NOT NULL)"
)
_TOKEN_SQL = cast(
    LiteralString,
    "INSERT INTO store_commits (store, seq, at) VALUES (%s, %s,"
    " EXTRACT(EPOCH FROM clock_timestamp())::float8)"
    " ON CONFLICT (store) DO UPDATE SET seq = EXCLUDED.seq, at = EXCLUDED.at",
)
_TOKEN_STALE_SECONDS = 7 * 86400
"""Tokens of stores not heard from in a week are pruned (their questions were
asked long ago: a store asks right after it reconnects)."""

_READ_VERBS = ("SELECT", "WITH", "SHOW")

_NAMED_DDL = re.compile(
    r"^\s*(CREATE\s+(?:TABLE|INDEX)\s+IF\s+NOT\s+EXISTS|DROP\s+INDEX\s+IF\s+EXISTS)\s+(\w+)",
    re.IGNORECASE,
)

_FENCE_SQL = (
    "SELECT 1 / COALESCE((SELECT CASE WHEN owner = ? THEN 1 ELSE 0 END"
    " FROM sessions WHERE session_id = ? FOR SHARE), 0)"
)
"""The fence as one statement that needs no answer: unless the session is still
leased to the worker it fails (division by zero), and with it the whole
transaction. The row is share-locked to the commit, as on the SQLite store's fence."""

_MARK = "\x00zuno-mark"
"""A value whose JSON text marks where SQL puts a number it computes."""


def _split_json(data: dict[str, Any], key: str) -> tuple[str, str]:
    """``json.dumps(data)`` cut around the value of ``key`` (SQL puts its value between)."""
    head, tail = json.dumps({**data, key: _MARK}).rsplit(json.dumps(_MARK), 1)
    return head, tail


class _Lost(Exception):
    """The connection dropped in a transaction (``__cause__`` says why)."""


class _SetAside(Exception):
    """A queued row the server refused for good, while the queue was being written."""

    def __init__(self, index: int, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.index = index
        self.error = error


@dataclass
class _Sent:
    """One statement of a pipelined transaction."""

    sql: LiteralString
    params: tuple[Any, ...]
    entry: int | None
    """The queued row it writes; None for the caller's statements (and BEGIN, COMMIT)."""
    cursor: _Cursor | None = None


@dataclass
class _Tx:
    """A transaction in flight on one connection, in pipeline mode."""

    conn: _PgConnection
    seq: int
    """Its commit token: the store's transaction number."""
    stack: ExitStack
    sent: list[_Sent] = field(default_factory=list[_Sent])
    body: list[_Sent] = field(default_factory=list[_Sent])
    """The caller's statements, in order (replayed when the transaction is written again)."""
    written: int = 0
    observed: bool = False
    """The caller has read a result (its statements cannot be replayed blindly)."""
    committing: bool = False
    in_body: bool = False
    """The caller's statements are being sent."""
    lost: BaseException | None = None
    """Why the connection went while the caller was writing (nothing sent since)."""
    relaxed: bool = False
    """The caller's statements are harmless to lose in a crash of the server (a step's opening)."""


class _NoRows:
    """The result of a schema statement skipped because what it creates exists."""

    lastrowid = None
    rowcount = 0

    def fetchone(self) -> Any:
        return None

    def fetchall(self) -> list[Any]:
        return []

    def __iter__(self) -> Iterator[Any]:
        return iter(())


class _Rows:
    """The result of a statement sent in a pipelined transaction.

    Reading it waits for the server's answer (one round trip, shared by every
    statement sent before it).
    """

    lastrowid = None

    def __init__(self, store: PostgresStore, sent: _Sent) -> None:
        self._store = store
        self._sent = sent

    def _cursor(self) -> _Cursor:
        return self._store._arrived(self._sent)  # pyright: ignore[reportPrivateUsage]

    def fetchone(self) -> Any:
        return self._cursor().fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor().fetchall()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    @property
    def rowcount(self) -> int:
        return self._cursor().rowcount


class _Connection:
    """The part of ``sqlite3.Connection`` Zuno uses, over the store's current psycopg connection."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        # Parameters always go with the statement, so ``%%`` is always read as ``%``.
        params = tuple(storable_params(params, nul=True))
        return self._store._execute(sql, params)  # pyright: ignore[reportPrivateUsage]

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        for row in params:
            self.execute(sql, row)

    def close(self) -> None:
        self._store._disconnect()  # pyright: ignore[reportPrivateUsage]


def _loss(exc: BaseException) -> BaseException | None:
    """The earliest error in ``exc``'s chain saying the connection is gone, if any.

    Class 08 (connection exception) and 57P (the server shut the session down:
    ``pg_terminate_backend``, a restart). psycopg may report a later error
    (such as leaving pipeline mode with answers unread) over the first one.
    """
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 16:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for error in reversed(chain):
        state = getattr(error, "sqlstate", None) or ""
        if state.startswith(("08", "57P")):
            return error
    return None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class PostgresStore(SQLiteStore):
    """The durable store in a PostgreSQL database (``postgresql://`` connection string)."""

    def __init__(self, dsn: str, *, migrate: bool = True) -> None:
        # Not SQLiteStore.__init__: there is no file to open.
        self.dsn = dsn
        self.busy_timeout = 0.0
        self.single_host = False
        self._init_state()
        self._wanted: list[tuple[str, tuple[Any, ...]]] = []
        """Reads asked to ride with the next step's opening (:meth:`prefetch`)."""
        self._prefetched: dict[tuple[str, tuple[Any, ...]], Any] = {}
        """Their rows, valid until the next transaction."""
        self._pg: _PgConnection | None = None
        self._lost_because: BaseException | None = None
        """Why the last connection was lost, until a new one opens (errors name it first)."""
        self._tx_now: _Tx | None = None
        self._keys: dict[str, tuple[str, ...]] = {}
        self._sql: dict[str, LiteralString] = {}
        self._session_sql: list[LiteralString] = []
        # The commit token: this open store's name and its transactions' numbers.
        self._store_name = f"{uuid.uuid4().hex}:{os.getpid()}"
        self._seq = 0
        self._tokens = False
        self._ddl = False
        """The next transactions change the schema (they take the schema lock)."""
        self._relations: set[str] | None = None
        """Tables and indexes of the schema, read in a schema transaction."""
        self._unconfirmed: tuple[int, int] | None = None
        """A commit whose answer was lost and not yet asked about: (its seq, rows it wrote)."""
        self._db = cast(sqlite3.Connection, _Connection(self))
        try:
            self._open_connection()
        except psycopg.Error as exc:
            raise StoreUnavailable(self._problem(exc)) from exc
        try:
            if migrate:
                self._create_schema()
            else:
                self._open_for_reading()
            self._tokens = "store_commits" in self._tables(self._db)
        except psycopg.Error as exc:
            self._close_quietly()
            raise StoreUnavailable(self._problem(exc)) from exc
        except StoreError:
            self._close_quietly()
            raise

    @property
    def connection(self) -> _PgConnection:
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
        lost = f"the connection was lost ({_first_line(cause)}) and " if cause else ""
        raise StoreUnavailable(
            f"cannot use PostgreSQL at {self._where()}: {lost}{_RECONNECT_TRIES} attempts "
            f"to connect failed ({_first_line(last) if last else 'no answer'}): check that "
            "the server runs and accepts this connection string (--db or ZUNO_DB)"
        ) from (cause or last)

    def acquire_session(self, session_id: str, worker_id: str) -> SessionRecord:
        """As on SQLite; a row lock held past ``lock_timeout`` reads as a busy session.

        The lock is another worker's transaction on the session (a dead peer's, until
        the server ends it): a ``--wait`` loop asks again, within its own deadline.
        """
        try:
            return super().acquire_session(session_id, worker_id)
        except StoreUnavailable as exc:
            if not isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
                raise
            raise SessionBusy(
                f"session {session_id} is locked by another worker's transaction (a worker "
                "that was cut off holds it until the server ends its session): use --wait "
                "SECONDS, or try again shortly",
                session_id,
                None,
                None,
            ) from exc

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

    def _dropped(self, conn: _PgConnection | None = None) -> bool:
        conn = conn or self._pg
        return conn is None or conn.closed or conn.broken

    def _live(self) -> _PgConnection:
        if self._dropped():
            self._reconnect(None)
        assert self._pg is not None
        return self._pg

    # Statements ---------------------------------------------------------------

    def _translate(self, sql: str) -> LiteralString:
        text = self._sql.get(sql)
        if text is None:
            text = self._sql[sql] = cast(LiteralString, to_postgres(sql, self._primary_key))
        # The SQL is the codebase's own (values travel as parameters).
        return text

    def _primary_key(self, table: str) -> tuple[str, ...]:
        keys = self._keys.get(table)
        if keys is None:
            # A table created after this connection opened.
            rows = self._execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a"
                " ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
                " WHERE i.indrelid = ?::regclass AND i.indisprimary"
                " ORDER BY array_position(i.indkey::int2[], a.attnum)",
                (table,),
            ).fetchall()
            keys = self._keys[table] = tuple(str(r[0]) for r in rows)
        return keys

    def _execute(self, sql: str, params: tuple[Any, ...]) -> Any:
        text = self._translate(sql)
        tx = self._tx_now
        if tx is not None and self._ddl and not self._missing(text):
            return _NoRows()
        if tx is not None:
            sent = self._send(tx, _Sent(text, params, None))
            tx.body.append(sent)
            return _Rows(self, sent)
        return self._autocommit(text, params)

    def _autocommit(self, text: LiteralString, params: tuple[Any, ...]) -> _Cursor:
        """One statement outside a transaction; a read is retried once on a new connection."""
        conn = self._live()
        try:
            return conn.execute(text, params)
        except psycopg.Error as exc:
            if not self._dropped(conn) and _loss(exc) is None:
                raise
            self._reconnect(self._lost_because or _loss(exc) or exc)
            if not text.lstrip().upper().startswith(_READ_VERBS):
                raise StoreUnavailable(
                    f"the connection to PostgreSQL at {self._where()} was lost "
                    f"({_first_line(exc)}); it is connected again: retry"
                ) from exc
            assert self._pg is not None
            return self._pg.execute(text, params)

    def _missing(self, text: str) -> bool:
        """Whether a schema statement has work to do (its table or index is not there yet).

        Running ``CREATE INDEX IF NOT EXISTS`` or ``ALTER TABLE`` on what exists
        still locks the table, and a worker opening the store would then wait
        for (or deadlock with) workers writing in it: what exists is skipped.
        """
        match = _NAMED_DDL.match(text)
        if match is None:
            return True
        if self._relations is None:
            self._relations = set()  # no recursion: this read is not DDL
            rows = self._execute(
                "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace",
                (),
            ).fetchall()
            self._relations = {str(r[0]) for r in rows}
        name = match.group(2)
        if match.group(1).upper().startswith("DROP"):
            return name in self._relations
        if name in self._relations:
            return False
        self._relations.add(name)
        return True

    def _send(self, tx: _Tx, sent: _Sent) -> _Sent:
        if tx.lost is not None:
            # The connection went while the caller was writing: keep its statements
            # (replayed on a new connection at the commit) without sending them.
            tx.sent.append(sent)
            return sent
        while True:
            tx.sent.append(sent)
            try:
                sent.cursor = tx.conn.execute(sent.sql, sent.params)
                return sent
            except _Lost as lost:
                if not tx.in_body:
                    raise
                tx.lost = lost.__cause__ or lost
                return sent
            except psycopg.Error as exc:
                # In pipeline mode the error may be an earlier statement's answer.
                # _failed returns only once the transaction was written again
                # without a refused queued row: then this statement goes again.
                try:
                    self._failed(tx, exc)
                except _Lost as lost:
                    # The connection went (seen as this statement's error): as above.
                    if not tx.in_body:
                        raise
                    tx.lost = lost.__cause__ or lost
                    return sent

    def _arrived(self, sent: _Sent) -> _Cursor:
        """The cursor of ``sent`` once its answer is in (syncing the pipeline if needed)."""
        tx = self._tx_now
        while sent.cursor is None or sent.cursor.pgresult is None:
            if tx is None:
                raise StoreUnavailable("a result was read after its transaction ended")
            if tx.lost is not None:
                raise _Lost() from tx.lost
            self._sync(tx)
        if tx is not None and sent.entry is None:
            tx.observed = True
        return sent.cursor

    def _sync(self, tx: _Tx) -> None:
        pipeline = tx.conn._pipeline  # pyright: ignore[reportPrivateUsage]
        try:
            assert pipeline is not None
            pipeline.sync()
        except psycopg.Error as exc:
            self._failed(tx, exc)

    def _failed(self, tx: _Tx, exc: psycopg.Error) -> None:
        """Act on an error the pipeline reported; returns only when the transaction was repaired."""
        lost = _loss(exc)
        stuck = tx.conn.pgconn.pipeline_status and "pipeline mode" in str(exc)
        if self._dropped(tx.conn) or lost is not None or stuck:
            # Gone, or left unusable with answers unread: replaced before the next use.
            cause = lost or exc
            self._lost_because = self._lost_because or cause
            self._disconnect()
            raise _Lost() from cause
        culprit = next((s for s in tx.sent if s.cursor is None or s.cursor.pgresult is None), None)
        if culprit is None or culprit.entry is None or self._transient(exc):
            raise exc
        if tx.body or tx.committing:
            # The caller's statements are suspended (or done): write the
            # transaction again without that row, then replay them.
            self._repair(tx, culprit.entry, exc)
            return
        raise _SetAside(culprit.entry, exc)

    # Transactions -------------------------------------------------------------

    def _begin(self) -> None:
        # Only for code that opens a transaction by hand; _tx is the store's own.
        self._db.execute("BEGIN ISOLATION LEVEL READ COMMITTED")

    def _open(self) -> _Tx:
        """A new transaction, in pipeline mode: BEGIN, its commit token, the queued rows."""
        for attempt in range(_COMMIT_TRIES + 1):
            conn = self._live()
            self._seq += 1
            stack = ExitStack()
            stack.enter_context(conn.pipeline())
            tx = _Tx(conn, self._seq, stack)
            self._tx_now = tx
            try:
                self._send_begin(tx)
                self._write_queue(tx)
                return tx
            except _Lost as lost:
                self._abandon(tx)
                if attempt == _COMMIT_TRIES:
                    raise self._unavailable(lost) from lost.__cause__
                self._reconnect(lost.__cause__)
            except BaseException:
                self._abandon(tx)
                raise
        raise AssertionError("unreachable")

    def _write_queue(self, tx: _Tx, *, one_by_one: bool = False) -> None:
        """Send the queued rows; one by one (each answered) after a row was refused."""
        index = 0
        while index < len(self._pending):
            entry = self._pending[index]
            try:
                if callable(entry):
                    sent_before = len(tx.sent)
                    body_before = len(tx.body)
                    entry(self._db)
                    # Its statements belong to the queued entry, not to the caller.
                    for sent in tx.sent[sent_before:]:
                        sent.entry = index
                    del tx.body[body_before:]
                else:
                    sql, params = entry
                    self._send(
                        tx,
                        _Sent(
                            self._translate(sql),
                            tuple(storable_params(params, nul=True)),
                            index,
                        ),
                    )
                if one_by_one:
                    self._sync(tx)
            except _SetAside as refused:
                self._restart(tx, refused.index, refused.error)
                one_by_one = True
                index = 0
                continue
            except psycopg.Error as exc:
                # A callable's own statement, answered at once: refused for good.
                if self._transient(exc) or self._dropped(tx.conn):
                    raise
                self._restart(tx, index, exc)
                one_by_one = True
                index = 0
                continue
            index += 1
        tx.written = index

    def _restart(self, tx: _Tx, index: int, exc: Exception) -> None:
        """Roll ``tx`` back, set queued row ``index`` aside, begin again on the same connection."""
        self._rollback_pipeline(tx)
        self._set_aside(index, exc)
        tx.sent.clear()
        tx.stack.enter_context(tx.conn.pipeline())
        self._send_begin(tx)

    def _send_begin(self, tx: _Tx) -> None:
        self._send(tx, _Sent("BEGIN ISOLATION LEVEL READ COMMITTED", (), None))
        if self._ddl:
            # Workers starting together wait their turn for the schema, however long.
            self._send(tx, _Sent("SET LOCAL lock_timeout = 0", (), None))
            self._send(tx, _Sent(_SCHEMA_LOCK_SQL, (), None))
            self._relations = None  # read again under the lock
        if self._tokens:
            self._send(tx, _Sent(_TOKEN_SQL, (self._store_name, tx.seq), None))

    def _repair(self, tx: _Tx, index: int, exc: Exception) -> None:
        """Write ``tx`` again without the refused queued row; replay the caller's statements."""
        self._restart(tx, index, exc)
        self._write_queue(tx, one_by_one=True)
        for sent in tx.body:
            sent.cursor = None
            tx.sent.append(sent)
            try:
                sent.cursor = tx.conn.execute(sent.sql, sent.params)
            except psycopg.Error as again:
                self._failed(tx, again)

    def _rollback_pipeline(self, tx: _Tx) -> None:
        """Leave pipeline mode and roll back, keeping whatever error came first."""
        with suppress(Exception):
            tx.stack.close()
        tx.stack = ExitStack()
        if not self._dropped(tx.conn):
            with suppress(Exception):  # the first error is the one that matters
                tx.conn.execute("ROLLBACK")

    def _abandon(self, tx: _Tx) -> None:
        self._tx_now = None
        self._rollback_pipeline(tx)

    def _rollback(self) -> None:
        if self._tx_now is not None:
            self._abandon(self._tx_now)
        elif not self._dropped():
            with suppress(Exception):  # no transaction left to roll back
                assert self._pg is not None
                self._pg.execute("ROLLBACK")

    def _harmless(self, entry: object) -> bool:
        """Whether losing this queued row in a crash of the server loses nothing that matters.

        Events (the transcript beside the rows; a lost ``call.inspected`` only
        makes the inspection rule ask again), rows of read-only Safe calls (a
        read, which may run again) and of refused calls (they changed nothing)
        qualify. A side-effecting call's rows and a step's row (its number
        anchors the next ones) do not.
        """
        if not isinstance(entry, tuple):
            return False
        sql, params = cast(tuple[str, tuple[Any, ...]], entry)
        if sql in (self._EVENT_SQL, self._OWNED_EVENT_SQL) or sql.startswith(
            self._RESULT_EVENT_SQL
        ):
            return True
        if sql == self._CALL_SQL:
            read_only = params[8] == "read_only" and params[9] == "safe"
            return read_only or (params[11] == "finished" and params[12] == "blocked")
        return False

    def _commit(self, tx: _Tx) -> None:
        tx.in_body = False
        tx.committing = True
        if tx.lost is not None:
            raise _Lost() from tx.lost  # COMMIT never left: written again on a new connection
        if (tx.relaxed or not tx.body) and all(
            self._harmless(e) for e in self._pending[: tx.written]
        ):
            # Only queued rows whose loss is harmless (see _harmless): the commit
            # does not wait for the WAL to reach the disk. A crash of the *server*
            # in the next moments may lose them; any later ordinary commit flushes
            # them first (the WAL is written in order), so no row that matters is
            # durable while one before it is lost. This wait was most of the time
            # of a read-only call's result.
            self._send(tx, _Sent("SET LOCAL synchronous_commit = off", (), None))
        while True:
            self._send(tx, _Sent("COMMIT", (), None))
            try:
                # Leaving pipeline mode sends the one Sync and reads every answer.
                tx.stack.close()
                return
            except psycopg.Error as exc:
                self._failed(tx, exc)  # returns once repaired: COMMIT again

    def _landed(self, seq: int) -> bool:
        """Whether the transaction numbered ``seq`` committed (read on a live connection)."""
        row = (
            self._live()
            .execute("SELECT seq FROM store_commits WHERE store = %s", (self._store_name,))
            .fetchone()
        )
        return row is not None and int(row[0]) >= seq

    def _settle_unconfirmed(self) -> None:
        """Ask about a commit whose answer was lost, before anything else is written."""
        if self._unconfirmed is None:
            return
        seq, written = self._unconfirmed
        try:
            landed = self._landed(seq)
        except psycopg.Error as exc:
            raise self._unavailable(exc) from exc
        self._unconfirmed = None
        if landed:
            self._forget(written)

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        cause = exc.__cause__ if isinstance(exc, _Lost) and exc.__cause__ else exc
        return StoreUnavailable(
            f"the connection to PostgreSQL at {self._where()} was lost ({_first_line(cause)})"
        )

    @contextmanager
    def _tx(self, *, relaxed: bool = False) -> Generator[sqlite3.Connection]:
        """One write transaction, pipelined: the queued rows first, then the caller's statements.

        On a failure it rolls back and the queue stays as it was; failures that
        mean "not now" are raised as :class:`StoreUnavailable`, naming the first cause.
        """
        with self._lock:
            # Rows read with an earlier transaction may be stale after this one.
            self._prefetched.clear()
            self._settle_unconfirmed()
            tx = self._open()
            tx.relaxed = relaxed
            tx.in_body = True
            try:
                yield self._db
            except _Lost as lost:
                self._abandon(tx)
                raise self._unavailable(lost) from lost.__cause__
            except BaseException as exc:
                self._abandon(tx)
                if isinstance(exc, Exception) and self._not_now(exc):
                    raise StoreUnavailable(self._problem(exc)) from exc
                raise
            self._finish(tx)

    def _finish(self, tx: _Tx) -> None:
        first: BaseException | None = None
        replay: list[_Sent] | None = None
        for attempt in range(_COMMIT_TRIES + 1):
            try:
                if replay is not None:
                    relaxed = tx.relaxed
                    tx = self._open()
                    tx.relaxed = relaxed
                    for sent in replay:
                        # The same objects: rows the caller reads after the commit are theirs.
                        sent.cursor = None
                        tx.body.append(self._send(tx, sent))
                    replay = None
                self._commit(tx)
            except _Lost as lost:
                first = first or lost.__cause__ or lost
                self._abandon(tx)
                written = tx.written
                try:
                    self._reconnect(first)
                    landed = self._tokens and self._landed(tx.seq)
                except (StoreError, psycopg.Error) as exc:
                    # The answer is lost and the server cannot be asked now:
                    # ask before the next transaction writes anything.
                    if self._tokens:
                        self._unconfirmed = (tx.seq, written)
                    if isinstance(exc, StoreUnavailable):
                        raise  # it names the first cause, then why reconnecting failed
                    raise self._unavailable(first) from first
                if landed:
                    self._forget(written)
                    return
                if tx.observed or not self._tokens or attempt == _COMMIT_TRIES:
                    raise self._unavailable(first) from first
                replay = tx.body
                continue
            except BaseException as exc:
                self._abandon(tx)
                if isinstance(exc, Exception) and self._not_now(exc):
                    raise StoreUnavailable(self._problem(exc)) from exc
                raise
            self._tx_now = None
            self._forget(tx.written)
            return

    # Opening and schema -------------------------------------------------------

    def _create_schema(self) -> None:
        self._ddl = True
        try:
            super()._create_schema()
        finally:
            self._ddl = False
        self._refresh_keys()

    def _open_for_reading(self) -> None:
        if not self._tables(self._db):
            raise StoreUnavailable(
                f"{self._where()} holds no Zuno store yet (nothing was recorded there): "
                "a writing command (zuno call, zuno run) creates it"
            )
        if self._inspect() is not None:
            # Read what is there; an upgrade is for a writing command.
            self._session_sql.append("SET default_transaction_read_only = on")
            self._db.execute("SET default_transaction_read_only = on")

    def _refresh_keys(self) -> None:
        rows = self._autocommit(_PRIMARY_KEYS_SQL, ()).fetchall()
        keys: dict[str, list[str]] = {}
        for table, column in rows:
            keys.setdefault(str(table), []).append(str(column))
        self._keys.update({t: tuple(c) for t, c in keys.items()})

    def ensure_schema(
        self, statements: Sequence[str], columns: Sequence[tuple[str, str, str]] = ()
    ) -> None:
        """Create a module's own tables and indexes when missing (one worker at a time)."""
        with self._lock:
            self._ddl = True
            try:
                super().ensure_schema(statements, *([columns] if columns else []))
            finally:
                self._ddl = False
            self._refresh_keys()

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
        super()._migrate(db)
        # SQLite's implicit rowid: sessions created in the same instant
        # are listed newest first by insertion order.
        if "rowid" not in self._columns(db, "sessions"):
            db.execute("ALTER TABLE sessions ADD COLUMN IF NOT EXISTS rowid BIGSERIAL")
        db.execute(_COMMITS_TABLE)
        db.execute(
            "DELETE FROM store_commits WHERE at < zuno_now() - ?", (float(_TOKEN_STALE_SECONDS),)
        )

    def _where(self) -> str:
        """The server and database, without the password."""
        return describe_dsn(self.dsn)

    def _problem(self, exc: Exception) -> str:
        first = _first_line(exc)
        if isinstance(exc, psycopg.OperationalError):
            return (
                f"cannot use PostgreSQL at {self._where()} ({first}): check that the server "
                "runs and accepts this connection string (--db or ZUNO_DB)"
            )
        if isinstance(exc, psycopg.ProgrammingError) and "dsn" in first.lower():
            return f"the PostgreSQL connection string is not valid ({first}): check --db or ZUNO_DB"
        return f"the store {self._where()} failed ({type(exc).__name__}: {first})"

    def _not_now(self, exc: BaseException) -> bool:
        """A driver error that means "not now" (a store error is raised as it is)."""
        return not isinstance(exc, StoreError) and self._transient(exc)

    def _transient(self, exc: BaseException) -> bool:
        return isinstance(exc, StoreError | psycopg.OperationalError | psycopg.InterfaceError)

    def _close_quietly(self) -> None:
        self._tx_now = None
        self._disconnect()

    @property
    def artifacts_root(self) -> Path:
        """``$ZUNO_ARTIFACTS``, else ``artifacts`` in the platform's data folder."""
        env = os.environ.get("ZUNO_ARTIFACTS")
        if env:
            return Path(env)
        return Path(platformdirs.user_data_dir("zuno")) / "artifacts"

    def append_event(self, event: Event) -> int:
        """One event, committed; its number is read after the commit (one round trip)."""
        sql, params = self._event_entry(event)
        with self._tx() as db:
            rows = db.execute(sql + " RETURNING seq", params)
        row = rows.fetchone()
        if row is None:
            self._not_held(event.session_id)
        return int(row[0])

    def _insert_event(self, db: sqlite3.Connection, event: Event) -> int:
        sql, params = self._event_entry(event)
        row = db.execute(sql + " RETURNING seq", params).fetchone()
        if row is None:
            self._not_held(event.session_id)
        return int(row[0])

    def _not_held(self, session_id: str) -> NoReturn:
        raise SessionBusy(
            f"session {session_id} is no longer held by this worker (its lease lapsed and "
            "another worker took it over): nothing more is written here",
            session_id,
            None,
            None,
        )

    # The hot path: one round trip per transaction ------------------------------

    def _fenced(
        self,
        session_id: str,
        worker: str,
        write: Callable[[sqlite3.Connection], Any],
        *,
        relaxed: bool = False,
    ) -> Any:
        """Run ``write`` in a transaction behind the fence; SessionBusy if the session was lost."""
        try:
            with self._tx(relaxed=relaxed) as db:
                db.execute(_FENCE_SQL, (worker, session_id))
                return write(db)
        except psycopg.errors.DivisionByZero:
            # Raised by the fence (nothing else here divides): say who holds it now.
            self._fence(self._db, session_id, worker)
            raise SessionBusy(
                f"session {session_id} is not held by this worker: nothing more runs here",
                session_id,
                None,
                None,
            ) from None

    def prefetch(self, sql: str, params: tuple[Any, ...]) -> None:
        """Send this read with the next step's opening; :meth:`query` then answers from it."""
        with self._lock:
            self._wanted.append((sql, tuple(params)))

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read query: prefetched with this step's opening, else asked now."""
        with self._lock:
            rows = self._prefetched.pop((sql, tuple(params)), None)
        if rows is not None:
            return [tuple(r) for r in rows.fetchall()]
        return super().query(sql, params)

    def begin_step(
        self, session_id: str, event: Event | None = None, *, worker: str | None = None
    ) -> int:
        """Open the session's next step (number allocated in the transaction); one round trip.

        The step's number is read after the commit: its event computes the
        same number in SQL, so nothing waits for an answer before ``COMMIT``.
        """

        def write(db: sqlite3.Connection) -> Any:
            # Past every step a call row names, too: a step whose row a crash of
            # the server lost (its commit does not wait for the disk, see below)
            # never has its number given again while a stored call refers to it.
            rows = db.execute(
                "INSERT INTO steps (session_id, step, created_at)"
                " SELECT ?, GREATEST(COALESCE(MAX(step), 0),"
                " COALESCE((SELECT MAX(c.step) FROM calls c WHERE c.session_id = ?), 0)) + 1, ?"
                " FROM steps WHERE session_id = ? RETURNING step",
                (session_id, session_id, self.clock(), session_id),
            )
            if event is not None:
                head, tail = _split_json(event.data, "step")
                db.execute(
                    "INSERT INTO events (session_id, call_id, kind, at, data)"
                    " SELECT ?, ?, ?, ?, ? || MAX(step) || ? FROM steps WHERE session_id = ?",
                    (
                        event.session_id,
                        event.call_id,
                        event.kind,
                        event.at + self.clock_offset,
                        head,
                        tail,
                        session_id,
                    ),
                )
            wanted, self._wanted = self._wanted, []
            for sql, params in wanted:
                # Answered with the commit: no round trip of their own.
                self._prefetched[(sql, params)] = db.execute(sql, params)
            return rows

        # Relaxed commit: the step's row and opening event are harmless to lose in
        # a crash of the server (an empty step; its number is not reused while a
        # call refers to it), and any later ordinary commit, such as a
        # side-effecting call's started row, writes them to disk first.
        if worker is None:
            with self._tx(relaxed=True) as db:
                rows = write(db)
        else:
            self._owner(session_id)  # a session lost by this process opens no step
            rows = self._fenced(session_id, worker, write, relaxed=True)
        step = int(rows.fetchone()[0])
        if event is not None:
            event.data["step"] = step
        return step

    def call_started(
        self, call: CallRecord, event: Event, *, durable: bool = True, fence: bool = False
    ) -> None:
        """Intent before effect, committed before the call runs; one round trip."""
        if not durable:
            super().call_started(call, event, durable=False, fence=fence)
            return

        entry = self._event_entry(event)

        def write(db: sqlite3.Connection) -> None:
            db.execute(self._CALL_SQL, self._call_params(call))
            db.execute(*entry)

        if fence:
            self._owner(call.session_id)  # a session lost by this process runs nothing
        if fence and call.runner is not None:
            self._fenced(call.session_id, call.runner, write)
        else:
            with self._tx() as db:
                write(db)

    def _guarded_finish(
        self, call: CallRecord, event: Event
    ) -> Callable[[sqlite3.Connection], None]:
        """The result over the call's ``started`` row and only over that, in one statement.

        As on SQLite: a row another worker settled meanwhile stays as settled and
        the result becomes a ``call.late_result`` event beside it; a row that was
        never stored is written whole. No answer is awaited before ``COMMIT``.
        """
        late_at = event.at + self.clock_offset
        head, tail = _split_json(json.loads(self._late_params(call, "", late_at)[4]), "settled_as")
        columns = ", ".join(CALL_FIELDS)
        values = ", ".join(["?"] * len(self._call_params(call)))
        # A result of a session this process holds lands only while it still holds it;
        # one of a session it lost is only ever a late result.
        owner = self._owned.get(call.session_id)
        if call.session_id in self._lost:
            fence, held = " AND 1 = 0", ()
        elif owner is not None:
            fence, held = _OWNER_FENCE, (call.session_id, owner)
        else:
            fence, held = "", ()
        params = (
            *self._finish_params(call),
            *held,
            *self._call_params(call),
            *held,
            *self._event_params(event),
            call.session_id,
            call.call_id,
            late_at,
            head,
            tail,
            call.call_id,
            call.attempt,
        )
        sql = (
            "WITH updated AS (UPDATE calls SET status = 'finished', outcome = ?, block_kind = ?,"
            " result = ?, is_error = ?, finished_at = ?, artifact = ?, reason = ?,"
            " finish_seq = ?"
            f" WHERE call_id = ? AND attempt = ? AND status = 'started'{fence} RETURNING 1),"
            f" inserted AS (INSERT INTO calls ({columns}) SELECT {values} WHERE TRUE{fence}"
            " ON CONFLICT DO NOTHING RETURNING 1),"
            " finished AS (INSERT INTO events (session_id, call_id, kind, at, data)"
            " SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM updated)"
            " OR EXISTS (SELECT 1 FROM inserted))"
            " INSERT INTO events (session_id, call_id, kind, at, data)"
            " SELECT ?, ?, 'call.late_result', ?,"
            " ? || to_json(COALESCE(c.outcome, 'None'))::text || ?"
            " FROM calls c WHERE c.call_id = ? AND c.attempt = ?"
            " AND NOT EXISTS (SELECT 1 FROM updated) AND NOT EXISTS (SELECT 1 FROM inserted)"
        )

        def finish(db: sqlite3.Connection) -> None:
            """UPDATE calls ... WHERE status = 'started' (a guarded result, one statement)"""
            db.execute(sql, params)

        return finish

    def append_messages(
        self, session_id: str, messages: Sequence[tuple[str, dict[str, Any]]]
    ) -> list[int]:
        """The session's next messages, numbered under the session's row lock; one transaction.

        Raises:
            SessionBusy: This process held the session and lost it (nothing is written).
        """
        owner = self._owner(session_id)

        def write(db: sqlite3.Connection) -> list[Any]:
            # READ COMMITTED: once the lock is held, the next statement sees every
            # message committed by the worker that held it before.
            db.execute("SELECT 1 FROM sessions WHERE session_id = ? FOR UPDATE", (session_id,))
            now = self.clock()
            return [
                db.execute(
                    "INSERT INTO messages (session_id, seq, role, body, at)"
                    " SELECT ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ? FROM messages"
                    " WHERE session_id = ? RETURNING seq",
                    (session_id, role, json.dumps(body), now, session_id),
                )
                for role, body in messages
            ]

        if owner is None:
            with self._tx() as db:
                written = write(db)
        else:
            written = self._fenced(session_id, owner, write)
        return [int(rows.fetchone()[0]) for rows in written]
