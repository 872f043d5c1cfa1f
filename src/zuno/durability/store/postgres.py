"""The PostgreSQL store: one history shared by many workers, on many machines.

It is the same store as on SQLite (:class:`~zuno.durability.store.transcript.SQLStore`:
the same records and rules, each statement rewritten by
:func:`zuno.durability.store.dialect.to_postgres`), over a connection that is
replaced when the server drops it (:mod:`zuno.durability.store.pg_connection`)
and transactions built for a server (:mod:`zuno.durability.store.pg_transactions`:
READ COMMITTED, one pipeline per transaction, a commit token for at most once).

Where the store reads then writes within a session (a message's next number),
it first locks that session's row (``SELECT ... FOR UPDATE``). The writes on
the hot path (a step's opening, a call's ``started`` row and its result) are
written here as statements that need no answer before ``COMMIT``: one round
trip each.

A server that cannot be reached is one
:class:`~zuno.durability.store.errors.StoreUnavailable` naming the server (never
the password).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import platformdirs
import psycopg

from zuno.durability.store.core import CALL_COLUMNS, OWNER_FENCE
from zuno.durability.store.errors import SessionBusy, StoreError, StoreUnavailable
from zuno.durability.store.pg_transactions import PostgresTransactions

if TYPE_CHECKING:
    from collections.abc import Callable

    from zuno.contract.events import Event
    from zuno.durability.store.records import CallRecord, SessionRecord

__all__ = ["PostgresStore"]


_COMMITS_TABLE = (
    "CREATE TABLE IF NOT EXISTS store_commits ("
    " store TEXT PRIMARY KEY, seq BIGINT NOT NULL, at DOUBLE PRECISION NOT NULL)"
)
_TOKEN_STALE_SECONDS = 7 * 86400
"""Tokens of stores not heard from in a week are pruned (their questions were
asked long ago: a store asks right after it reconnects)."""

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


class PostgresStore(PostgresTransactions):
    """The durable store in a PostgreSQL database (``postgresql://`` connection string)."""

    def __init__(self, dsn: str, *, migrate: bool = True) -> None:
        self._init_state()
        self._init_connection(dsn)
        self._init_transactions()
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

    @property
    def artifacts_root(self) -> Path:
        """``$ZUNO_ARTIFACTS``, else ``artifacts`` in the platform's data folder."""
        env = os.environ.get("ZUNO_ARTIFACTS")
        if env:
            return Path(env)
        return Path(platformdirs.user_data_dir("zuno")) / "artifacts"

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
        columns = CALL_COLUMNS
        values = ", ".join(["?"] * len(self._call_params(call)))
        # A result of a session this process holds lands only while it still holds it;
        # one of a session it lost is only ever a late result.
        owner = self._owned.get(call.session_id)
        if call.session_id in self._lost:
            fence, held = " AND 1 = 0", ()
        elif owner is not None:
            fence, held = OWNER_FENCE, (call.session_id, owner)
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
