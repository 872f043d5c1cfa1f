"""The store's core: its state, its queue of deferred writes, its schema and its leases.

Both stores (:class:`~zuno.durability.store.sqlite.SQLiteStore` and
:class:`~zuno.durability.store.postgres.PostgresStore`) are this core with
their own connection and transaction handling; what else differs between the
databases (the schema's catalog, which errors mean "not now") is a small
:class:`Dialect` object. The statements are written once, in SQLite's dialect;
the PostgreSQL store rewrites each one (:mod:`zuno.durability.store.dialect`).

Writes that need no commit of their own (a step's opening, a blocked call, a
read-only call's ``started`` row) wait in a queue and ride with the next
transaction. The queue never loses a row and never jams:

- a transaction that cannot start (another process holds the write lock past
  the busy timeout) or cannot commit leaves the queue as it was, to be written
  by the next one; a call's result that cannot be committed now joins the
  queue instead of being dropped;
- a queued row that can never be written (a constraint it breaks) is set aside,
  with a warning, so the rows after it are written;
- every string is bound through :func:`zuno.durability.store.storable.storable_params`, so
  text UTF-8 cannot encode is stored escaped instead of raising.

Ownership: a session is leased by one worker at a time
(:meth:`~zuno.durability.store.sessions.SessionStore.acquire_session`); a step's
number is allocated, and a side-effecting call's ``started`` row inserted, only
while the session is still this worker's (the fence). Times of leases are the
database's clock, ``zuno_now()``.

Opening checks ``meta.schema_version``: a store newer than this Zuno is refused.
Only a writing open (``migrate=True``) creates or upgrades tables; a reading
open (``zuno sessions``, ``zuno show``) changes no schema: it reads an older
store as it is (missing columns read as NULL).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, cast

from zuno.durability.store.connection import StoreConnection
from zuno.durability.store.errors import (
    SessionBusy,
    StoreError,
    StoreUnavailable,
    StoreVersionError,
)
from zuno.durability.store.schema import (
    ADDED_COLUMNS,
    CALL_FIELDS,
    CORE_TABLES,
    INDEXES,
    SCHEMA,
    SCHEMA_VERSION,
    SESSION_FIELDS,
    newer_schema_message,
)
from zuno.durability.workers import WorkerIdentity

__all__ = ["CALL_COLUMNS", "OWNER_FENCE", "Dialect", "Pending", "StoreCore"]

_log = logging.getLogger("zuno.durability.store")

CALL_COLUMNS = ", ".join(CALL_FIELDS)
"""The columns of a ``calls`` row, in :class:`~zuno.durability.store.records.CallRecord`'s order."""

_SESSION_COLUMNS = ", ".join(f"s.{c}" for c in SESSION_FIELDS)

Pending = tuple[str, tuple[Any, ...]] | Callable[[sqlite3.Connection], None]
"""A queued write: a statement and its parameters, or a function run inside the
transaction (a guarded update that decides its own event)."""

OWNER_FENCE = " AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = ? AND s.owner = ?)"
"""A condition that holds while the session is leased to the worker given."""


class Dialect(Protocol):
    """What differs between two databases, apart from connections and transactions."""

    single_host: bool
    """Whether every worker of a store runs on one machine (a SQLite file): then a
    legacy ``pid:start`` runner can be judged by ``/proc``."""

    def tables(self, db: sqlite3.Connection) -> set[str]:
        """The names of the tables the store holds."""
        ...

    def columns(self, db: sqlite3.Connection, table: str) -> set[str]:
        """The names of ``table``'s columns."""
        ...

    def transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` says "not now" (the whole transaction) rather than "not this row"."""
        ...

    def problem(self, exc: Exception, where: str) -> str:
        """What went wrong with the store at ``where``, in one line a person can act on."""
        ...


class StoreCore:
    """The state, queue, schema and leases shared by every store.

    A store class adds its connection and its transactions: it sets
    :attr:`dialect` and ``_db``, and implements ``_tx``, ``_rollback``,
    ``_close_quietly``, ``_where`` and :attr:`artifacts_root`.
    """

    _db: sqlite3.Connection
    """The connection (binding only storable text); SQLite's, or one that speaks its dialect."""

    dialect: Dialect
    """The database's differences (catalog, errors)."""

    single_host: bool = False
    """Whether every worker of this store runs on one machine (a SQLite file): then a
    legacy ``pid:start`` runner can be judged by ``/proc``."""

    def _init_state(self) -> None:
        """The in-process state every store keeps beside its connection."""
        self._lock = threading.RLock()
        # Writes that need no commit of their own (a step's opening, a blocked
        # call, which changed nothing): they ride in the next transaction, in order.
        self._pending: list[Pending] = []
        # Deferred started rows by (call_id, attempt): their index in _pending.
        self._deferred_calls: dict[tuple[str, int], int] = {}
        self._call_columns = CALL_COLUMNS
        self._session_columns = _SESSION_COLUMNS
        self.closed = False
        """Whether :meth:`close` was called (nothing more is written)."""
        self.migration_needed: str | None = None
        """Why this store needs a schema upgrade that this (reading) open did not do."""
        self._owned: dict[str, str] = {}
        """Sessions a runtime of this process holds, by id: the worker id that holds them."""
        self._lost: dict[str, str] = {}
        """Sessions this process held until its lease lapsed, by id: why nothing is written."""
        self.fence_check: Callable[[], None] | None = None
        """Set by this process's lease: fences it now if its deadline passed
        (zuno.durability.fencing).
        """
        self._orders: dict[str, int] = {}
        """The last place handed out in each session's order (:meth:`next_order`)."""
        self.clock_offset = 0.0
        """The database's clock minus this machine's (seconds), measured on the connection
        and at every lease heartbeat: times this store writes are on the database's clock."""

    # Opening and schema -------------------------------------------------------------

    def _inspect(self) -> str | None:
        """Check a store opened for reading; returns why it needs an upgrade, or None.

        Raises:
            StoreVersionError: Newer than this Zuno, or missing whole tables.
            StoreUnavailable: A database that is not a Zuno store.
        """
        db = self._db
        tables = self._tables(db)
        if not tables & {"meta", "sessions", "calls"}:
            raise StoreUnavailable(
                f"{self._where()} holds a database that is not a Zuno store: give --db "
                "(or ZUNO_DB) a Zuno store or a new location"
            )
        version = self._stored_version(db)
        missing = [t for t in CORE_TABLES if t not in tables]
        if missing:
            raise StoreVersionError(
                f"the store {self._where()} was made by an older Zuno and lacks the "
                f"{', '.join(missing)} table(s); this command only reads: run a writing "
                "command (such as `zuno tools`) once to upgrade it"
            )
        have = self._columns(db, "calls")
        absent = [c for c in CALL_FIELDS if c not in have]
        have_sessions = self._columns(db, "sessions")
        self._session_columns = ", ".join(
            f"s.{c}" if c in have_sessions else f"NULL AS {c}" for c in SESSION_FIELDS
        )
        absent += [f"sessions.{c}" for c in SESSION_FIELDS if c not in have_sessions]
        if absent or version is None or version < SCHEMA_VERSION:
            self._call_columns = ", ".join(c if c in have else f"NULL AS {c}" for c in CALL_FIELDS)
            self.migration_needed = (
                f"the store {self._where()} has schema version {version or 0}"
                + (
                    f" (no {', '.join(c if '.' in c else 'calls.' + c for c in absent)})"
                    if absent
                    else ""
                )
                + f" and this Zuno writes version {SCHEMA_VERSION}: it is shown as it is; "
                "any writing command (zuno call, zuno run) upgrades it"
            )
        return self.migration_needed

    def _create_schema(self) -> None:
        with self._tx() as db:
            self._stored_version(db)  # refuses a newer store before any change
            for statement in SCHEMA:
                db.execute(statement)
            self._migrate(db)
            for statement in INDEXES:
                db.execute(statement)
            db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )

    def _stored_version(self, db: sqlite3.Connection) -> int | None:
        """The store's ``meta.schema_version`` (None: no meta yet).

        Raises:
            StoreVersionError: Newer than :data:`SCHEMA_VERSION`, or unreadable.
        """
        if "meta" not in self._tables(db):
            return None
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            return None
        try:
            version = int(row[0])
        except (TypeError, ValueError):
            raise StoreVersionError(
                f"the store {self._where()} has an unreadable schema version ({row[0]!r}): "
                "it was not made by Zuno, or is damaged; give --db another store"
            ) from None
        if version > SCHEMA_VERSION:
            raise StoreVersionError(newer_schema_message(self._where(), version))
        return version

    def _tables(self, db: sqlite3.Connection) -> set[str]:
        return self.dialect.tables(db)

    def _columns(self, db: sqlite3.Connection, table: str) -> set[str]:
        return self.dialect.columns(db, table)

    def _migrate(self, db: sqlite3.Connection) -> None:
        """Stores made before a column existed get it added, never rebuilt."""
        self._add_columns(db, ADDED_COLUMNS)

    def _add_columns(self, db: sqlite3.Connection, columns: Sequence[tuple[str, str, str]]) -> None:
        have: dict[str, set[str]] = {}
        for table, column, kind in columns:
            if table not in have:
                have[table] = self._columns(db, table)
            if column not in have[table]:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                have[table].add(column)

    @property
    def location(self) -> str:
        """Where the store is, as a person named it (a path, a URL without its password)."""
        return self._where()

    def _where(self) -> str:
        """The store, as a person named it."""
        raise NotImplementedError

    def _problem(self, exc: Exception) -> str:
        """What went wrong with the store, in one line a person can act on."""
        return self.dialect.problem(exc, self._where())

    def _transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` says "not now" (the whole transaction) rather than "not this row"."""
        return self.dialect.transient(exc)

    def _close_quietly(self) -> None:
        """Close the connection, whatever state it is in."""
        raise NotImplementedError

    # Transactions and the queue ---------------------------------------------------

    def _tx(self) -> AbstractContextManager[sqlite3.Connection]:
        """One write transaction: the queued rows first, then the caller's statements.

        On any failure it rolls back and the queue stays as it was; failures that
        mean "not now" are raised as :class:`StoreUnavailable`.
        """
        raise NotImplementedError

    def _rollback(self) -> None:
        """Roll back the transaction in progress, if any (never raises)."""
        raise NotImplementedError

    @property
    def artifacts_root(self) -> Path:
        """Where full outputs of this store's calls are kept."""
        raise NotImplementedError

    def close(self) -> None:
        """Write what is queued, then close; rows that still cannot be written are reported."""
        with self._lock:
            try:
                self.flush()
            except StoreError as exc:
                _log.error(
                    "zuno: %d record(s) could not be written before closing the store: %s",
                    len(self._pending),
                    exc,
                )
            finally:
                self.closed = True
                self._close_quietly()

    def _set_aside(self, index: int, exc: Exception) -> None:
        entry = self._pending.pop(index)
        sql: str = entry.__doc__ or repr(entry) if callable(entry) else entry[0]
        self._deferred_calls = {
            key: slot - (slot > index)
            for key, slot in self._deferred_calls.items()
            if slot != index
        }
        _log.warning(
            "zuno: a record could not be written to the store %s and was set aside "
            "(%s: %s; statement: %.60s)",
            self._where(),
            type(exc).__name__,
            exc,
            " ".join(sql.split()),
        )

    def _forget(self, written: int) -> None:
        """Drop the first ``written`` queued rows, now committed."""
        del self._pending[:written]
        self._deferred_calls = {
            key: slot - written for key, slot in self._deferred_calls.items() if slot >= written
        }

    def transaction(self) -> AbstractContextManager[StoreConnection]:
        """A committed write transaction, for modules that keep their own tables."""
        return self._tx()

    def prefetch(self, sql: str, params: tuple[Any, ...]) -> None:
        """Ask for a read to ride with the opening of the next step.

        A later :meth:`query` of the same statement and parameters, before any
        other transaction, gets those rows without asking the database again.
        Here a read is a local call and nothing is gained: it does nothing (the
        PostgreSQL store saves a round trip with it).
        """

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read query (deferred writes are committed first)."""
        self.flush()
        with self._lock:
            return [tuple(r) for r in self._db.execute(sql, params).fetchall()]

    def has_table(self, name: str) -> bool:
        """Whether the store holds table ``name``; creates nothing (for reading commands)."""
        with self._lock:
            return name in self._tables(self._db)

    def ensure_schema(
        self, statements: Sequence[str], columns: Sequence[tuple[str, str, str]] = ()
    ) -> None:
        """Create a module's own tables and indexes when missing.

        ``columns`` (table, column, type) are added to an older table that lacks
        them, before the statements run (an index may use them).
        """
        with self._tx() as db:
            created = [s for s in statements if "CREATE INDEX" not in s.upper()]
            for statement in created:
                db.execute(statement)
            self._add_columns(db, columns)
            for statement in statements:
                if statement not in created:
                    db.execute(statement)

    def flush(self) -> None:
        """Commit the queued writes now.

        Raises:
            StoreUnavailable: Not now (the queue is kept for the next transaction).
        """
        with self._lock:
            if self._pending:
                with self._tx():
                    pass

    def flush_or_keep(self) -> None:
        """Commit the queue now if the store allows; otherwise keep it for the next transaction."""
        try:
            self.flush()
        except StoreUnavailable as exc:
            _log.warning(
                "zuno: %d record(s) wait in memory for the store (%s); they are written "
                "with the next transaction",
                len(self._pending),
                exc,
            )

    def _defer(self, sql: str, params: tuple[Any, ...]) -> None:
        with self._lock:
            self._pending.append((sql, params))

    def _defer_call(self, write: Callable[[sqlite3.Connection], None]) -> None:
        with self._lock:
            self._pending.append(write)

    # Ownership, order and the clock ------------------------------------------------

    def next_order(self, session_id: str) -> int:
        """The next place in ``session_id``'s order: where a call starts or finishes.

        The order is a per-session sequence, not a time: rules that ask whether
        one call came after another (the inspection rule) compare these numbers,
        so no host's clock can misplace a call. Only the session's holder runs
        its calls; it continues after the highest place stored when it first asks
        (and again after each :meth:`acquire_session`), so the places of a later
        holder always come after those of an earlier one.
        """
        with self._lock:
            last = self._orders.get(session_id)
        if last is None:
            # Read as stored, without committing the deferred rows first (the write
            # lock may be held elsewhere: calls still run meanwhile).
            with self._lock:
                row = self._db.execute(
                    "SELECT MAX(start_seq), MAX(finish_seq) FROM calls WHERE session_id = ?",
                    (session_id,),
                ).fetchone()
            last = max((int(v) for v in (row or ()) if v is not None), default=0)
        with self._lock:
            place = max(last, self._orders.get(session_id, 0)) + 1
            self._orders[session_id] = place
        return place

    def clock(self) -> float:
        """Now on the database's clock (this machine's clock corrected by the measured offset)."""
        return time.time() + self.clock_offset

    def note_clock(self, db_now: float, sent: float, received: float) -> None:
        """Record the database's time ``db_now``, read between local ``sent`` and ``received``."""
        self.clock_offset = db_now - (sent + received) / 2

    def _owner(self, session_id: str) -> str | None:
        """The worker id holding ``session_id`` in this process, or None when it holds none.

        Raises:
            SessionBusy: This process held it until its lease lapsed (it writes nothing more).
        """
        check = self.fence_check
        if check is not None and (self._owned or self._lost):
            check()  # a lease past its deadline fences before anything is written
        why = self._lost.get(session_id)
        if why is not None:
            raise SessionBusy(
                f"session {session_id} is no longer written by this worker: {why}",
                session_id,
                None,
                None,
            )
        return self._owned.get(session_id)

    def fence_sessions(self, reason: str) -> list[str]:
        """Stop every write to the sessions this process holds (its lease lapsed); returns them.

        Each one is written again only after it is acquired again (:meth:`acquire_session`).
        """
        # Not under the store's lock: a transaction stuck on a dead connection holds it.
        lost = list(self._owned)
        for session_id in lost:
            self._lost[session_id] = reason
            self._owned.pop(session_id, None)
        return lost

    def interrupt(self) -> None:
        """Break a transaction stuck on a dead connection (from another thread).

        A local file has no connection to break: nothing to do here.
        """

    def check_owner(self, db: StoreConnection, session_id: str) -> None:
        """In a transaction: raise :class:`SessionBusy` unless this process may write the session.

        For modules writing a session's rows with their own SQL (recovery notices):
        a session this process holds must still be leased to it.
        """
        owner = self._owner(session_id)
        if owner is not None:
            self._fence(cast(sqlite3.Connection, db), session_id, owner)

    def _fence(self, db: sqlite3.Connection, session_id: str, worker_id: str) -> None:
        """Raise :class:`SessionBusy` unless the session is still leased to ``worker_id``.

        On PostgreSQL the row is share-locked to the commit: a takeover waits
        until this transaction's rows are visible to the worker taking over.
        """
        row = db.execute(
            "SELECT owner FROM sessions WHERE session_id = ? /*pg: FOR SHARE*/", (session_id,)
        ).fetchone()
        owner = row[0] if row is not None else None
        if owner != worker_id:
            who = WorkerIdentity.parse(owner)
            name = who.short if who is not None else "no worker"
            raise SessionBusy(
                f"session {session_id} is now held by {name}, not by this worker (its lease "
                "expired and the session was taken over): nothing more runs here; "
                "`zuno show` has its history",
                session_id,
                owner,
                None,
            )

    def _on_clock(self, at: float | None) -> float | None:
        """A local time as the database's clock reads it."""
        return None if at is None else at + self.clock_offset
