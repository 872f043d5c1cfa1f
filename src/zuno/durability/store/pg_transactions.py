"""The PostgreSQL store's transactions: pipelined, checked by a token, repaired when refused.

- **Isolation.** Every transaction is ``BEGIN ISOLATION LEVEL READ
  COMMITTED``, whatever the database's default, so each statement sees what
  other workers committed before it. There is no global lock: workers in
  different sessions never wait for each other.
- **Round trips.** A transaction is one pipeline: ``BEGIN``, its commit token,
  the queued rows, the caller's statements and ``COMMIT`` travel together and
  their answers come back together. A statement whose rows the caller reads
  costs one more round trip (the rows must arrive before the code goes on).
  psycopg prepares the statements a connection runs often.
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

Each statement is the codebase's SQLite dialect, rewritten by
:func:`zuno.durability.store.dialect.to_postgres`; every string is bound through
:func:`zuno.durability.store.storable.storable_params`, which here also escapes
NUL (PostgreSQL's text cannot hold it).
"""

from __future__ import annotations

import os
import re
import sqlite3
import uuid
from collections.abc import Generator, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from typing import Any, LiteralString, cast

import psycopg

from zuno.durability.store.dialect import to_postgres
from zuno.durability.store.errors import StoreError, StoreUnavailable
from zuno.durability.store.pg_connection import PgCursor, PostgresConnections
from zuno.durability.store.pg_dialect import connection_loss, first_line
from zuno.durability.store.pg_pipeline import Lost, Sent, SetAside, Tx
from zuno.durability.store.storable import storable_params

__all__ = ["PostgresTransactions", "StoreStatements"]


_COMMIT_TRIES = 3
"""Times a transaction is written again after a commit that did not land."""

_SCHEMA_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('zuno-schema:' || current_schema()))"
"""Held by transactions that change the schema: two workers creating the same
table at once would otherwise collide in PostgreSQL's catalog. Writes of rows
never take it."""


_TOKEN_SQL = cast(
    LiteralString,
    "INSERT INTO store_commits (store, seq, at) VALUES (%s, %s,"
    " EXTRACT(EPOCH FROM clock_timestamp())::float8)"
    " ON CONFLICT (store) DO UPDATE SET seq = EXCLUDED.seq, at = EXCLUDED.at",
)

_NAMED_DDL = re.compile(
    r"^\s*(CREATE\s+(?:TABLE|INDEX)\s+IF\s+NOT\s+EXISTS|DROP\s+INDEX\s+IF\s+EXISTS)\s+(\w+)",
    re.IGNORECASE,
)


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

    def __init__(self, store: PostgresTransactions, sent: Sent) -> None:
        self._store = store
        self._sent = sent

    def _cursor(self) -> PgCursor:
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


class StoreStatements:
    """The part of ``sqlite3.Connection`` Zuno uses, over the store's current psycopg connection."""

    def __init__(self, store: PostgresTransactions) -> None:
        self._store = store

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement (SQLite's dialect): in the transaction in flight, else on its own."""
        # Parameters always go with the statement, so ``%%`` is always read as ``%``.
        params = tuple(storable_params(params, nul=True))
        return self._store._execute(sql, params)  # pyright: ignore[reportPrivateUsage]

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per row of parameters."""
        for row in params:
            self.execute(sql, row)

    def close(self) -> None:
        """Close the store's connection."""
        self._store._disconnect()  # pyright: ignore[reportPrivateUsage]


class PostgresTransactions(PostgresConnections):
    """The store's pipelined transactions over its PostgreSQL connection."""

    def _init_transactions(self) -> None:
        """The transactions' state: none in flight, no commit token yet."""
        self._wanted: list[tuple[str, tuple[Any, ...]]] = []
        """Reads asked to ride with the next step's opening (:meth:`prefetch`)."""
        self._prefetched: dict[tuple[str, tuple[Any, ...]], Any] = {}
        """Their rows, valid until the next transaction."""
        self._tx_now: Tx | None = None
        self._sql: dict[str, LiteralString] = {}
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
        self._db = cast(sqlite3.Connection, StoreStatements(self))

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
            sent = self._send(tx, Sent(text, params, None))
            tx.body.append(sent)
            return _Rows(self, sent)
        return self._autocommit(text, params)

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

    def _send(self, tx: Tx, sent: Sent) -> Sent:
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
            except Lost as lost:
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
                except Lost as lost:
                    # The connection went (seen as this statement's error): as above.
                    if not tx.in_body:
                        raise
                    tx.lost = lost.__cause__ or lost
                    return sent

    def _arrived(self, sent: Sent) -> PgCursor:
        """The cursor of ``sent`` once its answer is in (syncing the pipeline if needed)."""
        tx = self._tx_now
        while sent.cursor is None or sent.cursor.pgresult is None:
            if tx is None:
                raise StoreUnavailable("a result was read after its transaction ended")
            if tx.lost is not None:
                raise Lost() from tx.lost
            self._sync(tx)
        if tx is not None and sent.entry is None:
            tx.observed = True
        return sent.cursor

    def _sync(self, tx: Tx) -> None:
        pipeline = tx.conn._pipeline  # pyright: ignore[reportPrivateUsage]
        try:
            assert pipeline is not None
            pipeline.sync()
        except psycopg.Error as exc:
            self._failed(tx, exc)

    def _failed(self, tx: Tx, exc: psycopg.Error) -> None:
        """Act on an error the pipeline reported; returns only when the transaction was repaired."""
        lost = connection_loss(exc)
        stuck = tx.conn.pgconn.pipeline_status and "pipeline mode" in str(exc)
        if self._dropped(tx.conn) or lost is not None or stuck:
            # Gone, or left unusable with answers unread: replaced before the next use.
            cause = lost or exc
            self._lost_because = self._lost_because or cause
            self._disconnect()
            raise Lost() from cause
        culprit = next((s for s in tx.sent if s.cursor is None or s.cursor.pgresult is None), None)
        if culprit is None or culprit.entry is None or self._transient(exc):
            raise exc
        if tx.body or tx.committing:
            # The caller's statements are suspended (or done): write the
            # transaction again without that row, then replay them.
            self._repair(tx, culprit.entry, exc)
            return
        raise SetAside(culprit.entry, exc)

    # Transactions -------------------------------------------------------------

    def _begin(self) -> None:
        # Only for code that opens a transaction by hand; _tx is the store's own.
        self._db.execute("BEGIN ISOLATION LEVEL READ COMMITTED")

    def _open(self) -> Tx:
        """A new transaction, in pipeline mode: BEGIN, its commit token, the queued rows."""
        for attempt in range(_COMMIT_TRIES + 1):
            conn = self._live()
            self._seq += 1
            stack = ExitStack()
            stack.enter_context(conn.pipeline())
            tx = Tx(conn, self._seq, stack)
            self._tx_now = tx
            try:
                self._send_begin(tx)
                self._write_queue(tx)
                return tx
            except Lost as lost:
                self._abandon(tx)
                if attempt == _COMMIT_TRIES:
                    raise self._unavailable(lost) from lost.__cause__
                self._reconnect(lost.__cause__)
            except BaseException:
                self._abandon(tx)
                raise
        raise AssertionError("unreachable")

    def _write_queue(self, tx: Tx, *, one_by_one: bool = False) -> None:
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
                        Sent(
                            self._translate(sql),
                            tuple(storable_params(params, nul=True)),
                            index,
                        ),
                    )
                if one_by_one:
                    self._sync(tx)
            except SetAside as refused:
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

    def _restart(self, tx: Tx, index: int, exc: Exception) -> None:
        """Roll ``tx`` back, set queued row ``index`` aside, begin again on the same connection."""
        self._rollback_pipeline(tx)
        self._set_aside(index, exc)
        tx.sent.clear()
        tx.stack.enter_context(tx.conn.pipeline())
        self._send_begin(tx)

    def _send_begin(self, tx: Tx) -> None:
        self._send(tx, Sent("BEGIN ISOLATION LEVEL READ COMMITTED", (), None))
        if self._ddl:
            # Workers starting together wait their turn for the schema, however long.
            self._send(tx, Sent("SET LOCAL lock_timeout = 0", (), None))
            self._send(tx, Sent(_SCHEMA_LOCK_SQL, (), None))
            self._relations = None  # read again under the lock
        if self._tokens:
            self._send(tx, Sent(_TOKEN_SQL, (self._store_name, tx.seq), None))

    def _repair(self, tx: Tx, index: int, exc: Exception) -> None:
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

    def _rollback_pipeline(self, tx: Tx) -> None:
        """Leave pipeline mode and roll back, keeping whatever error came first."""
        with suppress(Exception):
            tx.stack.close()
        tx.stack = ExitStack()
        if not self._dropped(tx.conn):
            with suppress(Exception):  # the first error is the one that matters
                tx.conn.execute("ROLLBACK")

    def _abandon(self, tx: Tx) -> None:
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

    def _commit(self, tx: Tx) -> None:
        tx.in_body = False
        tx.committing = True
        if tx.lost is not None:
            raise Lost() from tx.lost  # COMMIT never left: written again on a new connection
        if (tx.relaxed or not tx.body) and all(
            self._harmless(e) for e in self._pending[: tx.written]
        ):
            # Only queued rows whose loss is harmless (see _harmless): the commit
            # does not wait for the WAL to reach the disk. A crash of the *server*
            # in the next moments may lose them; any later ordinary commit flushes
            # them first (the WAL is written in order), so no row that matters is
            # durable while one before it is lost. This wait was most of the time
            # of a read-only call's result.
            self._send(tx, Sent("SET LOCAL synchronous_commit = off", (), None))
        while True:
            self._send(tx, Sent("COMMIT", (), None))
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
        cause = exc.__cause__ if isinstance(exc, Lost) and exc.__cause__ else exc
        return StoreUnavailable(
            f"the connection to PostgreSQL at {self._where()} was lost ({first_line(cause)})"
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
            except Lost as lost:
                self._abandon(tx)
                raise self._unavailable(lost) from lost.__cause__
            except BaseException as exc:
                self._abandon(tx)
                if isinstance(exc, Exception) and self._not_now(exc):
                    raise StoreUnavailable(self._problem(exc)) from exc
                raise
            self._finish(tx)

    def _finish(self, tx: Tx) -> None:
        first: BaseException | None = None
        replay: list[Sent] | None = None
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
            except Lost as lost:
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

    def _not_now(self, exc: BaseException) -> bool:
        """A driver error that means "not now" (a store error is raised as it is)."""
        return not isinstance(exc, StoreError) and self._transient(exc)

    def _close_quietly(self) -> None:
        self._tx_now = None
        self._disconnect()
