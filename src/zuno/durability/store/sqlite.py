"""The SQLite store: one file, WAL mode, one short transaction per write.

Durability: with WAL and ``synchronous=NORMAL`` a committed transaction
survives a crash of the process (``kill -9``); only a power loss can take the
last ones back. Every write that matters (a call's ``started`` row, its
result) is its own committed transaction, written before the next step that
depends on it.

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
(:meth:`SQLiteStore.acquire_session`); a step's number is allocated, and a
side-effecting call's ``started`` row inserted, only while the session is
still this worker's (the fence). A result arriving for a row another worker
has settled meanwhile is recorded as a ``call.late_result`` event beside it,
never over it. Times of leases are the database's clock, ``zuno_now()``
(registered on every SQLite connection).

Opening checks ``meta.schema_version``: a store newer than this Zuno is refused.
Only a writing open (``migrate=True``) creates or upgrades tables; a reading
open (``zuno sessions``, ``zuno show``) changes no schema: it reads an older
store as it is (missing columns read as NULL, through a read-only connection)
and creates no file where there is none.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from zuno.durability.store.connection import StoreConnection
from zuno.durability.store.errors import (
    SessionBusy,
    StoreError,
    StoreUnavailable,
    StoreVersionError,
)
from zuno.durability.store.records import CallRecord, EventRecord, SessionRecord, iso
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
from zuno.durability.store.storable import storable_params
from zuno.durability.workers import WorkerIdentity, settleable_in

if TYPE_CHECKING:
    from zuno.contract.events import Event

__all__ = ["SQLiteStore"]

_log = logging.getLogger("zuno.durability.store")

_CALL_COLUMNS = ", ".join(CALL_FIELDS)
_SESSION_COLUMNS = ", ".join(f"s.{c}" for c in SESSION_FIELDS)

_Pending = tuple[str, tuple[Any, ...]] | Callable[[sqlite3.Connection], None]
"""A queued write: a statement and its parameters, or a function run inside the
transaction (a guarded update that decides its own event)."""

_OWNER_FENCE = " AND EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = ? AND s.owner = ?)"
"""A condition that holds while the session is leased to the worker given."""

_DEFERRED_STEP_SQL = "INSERT INTO steps (session_id, step, created_at) VALUES (?, ?, ?)"

_PREVIEW = 200
"""Characters of a late result kept in its ``call.late_result`` event."""


def _next_text(prefix: str) -> str | None:
    """The least text greater than every text starting with ``prefix`` (code point order)."""
    while prefix:
        last = ord(prefix[-1])
        if last < 0x10FFFF:
            following = last + 1 if not 0xD800 <= last + 1 <= 0xDFFF else 0xE000
            return prefix[:-1] + chr(following)
        prefix = prefix[:-1]
    return None


# SQLite's primary result codes that say "not now" rather than "not this row":
# busy, locked, out of memory, read-only, interrupted, I/O, corrupt, full,
# cannot open, protocol, not a database.
_TRANSIENT_CODES = frozenset({5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 26})


def _call(row: sqlite3.Row | tuple[Any, ...]) -> CallRecord:
    r = tuple(row)
    return CallRecord(
        call_id=r[0],
        session_id=r[1],
        step=r[2],
        index=r[3],
        attempt=r[4],
        tool=r[5],
        arguments=r[6],
        args_hash=r[7],
        effect=r[8],
        replay=r[9],
        concurrency=r[10],
        status=r[11],
        outcome=r[12],
        block_kind=r[13],
        result=r[14],
        is_error=bool(r[15]),
        started_at=r[16],
        finished_at=r[17],
        artifact=r[18],
        model_call_id=r[19],
        runner=r[20],
        reason=r[21],
        snapshot=r[22],
        mode=r[23],
        start_seq=r[24],
        finish_seq=r[25],
    )


class _Connection:
    """The part of ``sqlite3.Connection`` Zuno uses, binding only storable text."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._conn.execute(sql, storable_params(params))

    def executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> sqlite3.Cursor:
        return self._conn.executemany(sql, [storable_params(p) for p in params])

    def close(self) -> None:
        self._conn.close()


class SQLiteStore:
    """The durable store in one SQLite file.

    Args:
        path: The database file.
        migrate: Create or upgrade the schema (a writing command). False opens
            for reading: no schema change, no new file.
        busy_timeout: Seconds a transaction waits for another process's write lock.

    Raises:
        StoreUnavailable: The file cannot be opened as a store (a folder, not a
            database, damaged, locked, not writable).
        StoreVersionError: Its schema is newer than this Zuno's.
    """

    _db: sqlite3.Connection
    """The connection (binding only storable text); SQLite's, or one that speaks its dialect."""

    single_host: bool = False
    """Whether every worker of this store runs on one machine (a SQLite file): then a
    legacy ``pid:start`` runner can be judged by ``/proc``. Set by :meth:`__init__`."""

    def __init__(self, path: Path, *, migrate: bool = True, busy_timeout: float = 30.0) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.single_host = True
        self._init_state()
        if path.is_dir():
            raise StoreUnavailable(
                f"the store {path} is a folder, not a file: give --db (or ZUNO_DB) a file "
                f"path, such as {path / 'zuno.db'}"
            )
        try:
            if migrate:
                self._open_for_writing()
            else:
                self._open_for_reading()
        except sqlite3.Error as exc:
            self._close_quietly()
            raise StoreUnavailable(self._problem(exc)) from exc
        except StoreError:
            self._close_quietly()
            raise

    def _init_state(self) -> None:
        """The in-process state every store keeps beside its connection."""
        self._lock = threading.RLock()
        # Writes that need no commit of their own (a step's opening, a blocked
        # call, which changed nothing): they ride in the next transaction, in order.
        self._pending: list[_Pending] = []
        # Deferred started rows by (call_id, attempt): their index in _pending.
        self._deferred_calls: dict[tuple[str, int], int] = {}
        self._call_columns = _CALL_COLUMNS
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

    # Opening --------------------------------------------------------------------

    def _connect(self, target: str, *, uri: bool = False) -> None:
        conn = sqlite3.connect(
            target,
            isolation_level=None,
            check_same_thread=False,
            timeout=self.busy_timeout,
            uri=uri,
        )
        # The clock of leases (see zuno.durability.workers): one host, so the process's clock.
        conn.create_function("zuno_now", 0, time.time)
        self._db = cast(sqlite3.Connection, _Connection(conn))
        self._db.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")

    def _open_for_writing(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(
                f"cannot create the folder of the store {self.path} ({exc.strerror}): "
                "give --db (or ZUNO_DB) a path you may write"
            ) from exc
        self._connect(str(self.path))
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        # Checkpoints are where WAL mode pays its fsyncs; doing them less often
        # keeps per-call commits cheap (the WAL is folded back on close).
        self._db.execute("PRAGMA wal_autocheckpoint=16384")
        self._create_schema()

    def _open_for_reading(self) -> None:
        if self.path.exists():
            self._connect(f"file:{quote(str(self.path.resolve()))}?mode=ro", uri=True)
            if self._tables(self._db):
                if self._inspect() is None:
                    # Current: reopen writable (show settles calls a dead process left
                    # running), still without any schema statement.
                    self._close_quietly()
                    self._connect(str(self.path))
                return
            self._close_quietly()  # an empty file: nothing recorded yet
        # Nothing recorded there yet: an empty store in memory, no file created.
        self._connect(":memory:")
        self._create_schema()

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
        rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {str(r[0]) for r in rows}

    def _columns(self, db: sqlite3.Connection, table: str) -> set[str]:
        return {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")}

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
        return str(self.path)

    def _problem(self, exc: Exception) -> str:
        """What went wrong with the store, in one line a person can act on."""
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
        where = self._where()
        if code in (5, 6):
            return (
                f"the store {where} is locked by another process (waited "
                f"{self.busy_timeout:g} s); try again when that process has finished"
            )
        if code == 26:
            return (
                f"{where} is not a SQLite database (or it is damaged): give --db (or ZUNO_DB) "
                "a Zuno store or a new file name"
            )
        if code == 11:
            return (
                f"the store {where} is damaged ({exc}): restore it from a backup, or give "
                "--db (or ZUNO_DB) a new file name"
            )
        if code == 14:
            return (
                f"cannot open the store {where} ({exc}): check that its folder exists and "
                "that you may write there"
            )
        if code == 8:
            return f"the store {where} is read-only ({exc}): give --db a file you may write"
        if code == 13:
            return f"the disk holding the store {where} is full: free some space and retry"
        return f"the store {where} failed ({type(exc).__name__}: {exc})"

    def _transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` says "not now" (the whole transaction) rather than "not this row"."""
        if isinstance(exc, StoreError):
            return True
        code = getattr(exc, "sqlite_errorcode", None)
        return isinstance(exc, sqlite3.DatabaseError) and (code or 0) & 0xFF in _TRANSIENT_CODES

    def _close_quietly(self) -> None:
        db: sqlite3.Connection | None = getattr(self, "_db", None)
        if db is not None:
            with suppress(Exception):  # closing a connection that failed to open
                db.close()

    # Transactions ---------------------------------------------------------------

    def _begin(self) -> None:
        """Start a write transaction holding the write lock."""
        self._db.execute("BEGIN IMMEDIATE")

    def _rollback(self) -> None:
        with suppress(Exception):  # no transaction left to roll back
            self._db.execute("ROLLBACK")

    @property
    def artifacts_root(self) -> Path:
        """Where full outputs of this store's calls are kept."""
        return self.path.parent / (self.path.stem + "-artifacts")

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

    def _start(self) -> None:
        try:
            self._begin()
        except Exception as exc:
            if isinstance(exc, StoreError) or not self._transient(exc):
                raise
            raise StoreUnavailable(self._problem(exc)) from exc

    @contextmanager
    def _tx(self) -> Generator[sqlite3.Connection]:
        """One write transaction: the queued rows first, then the caller's statements.

        On any failure (the lock not obtained, a statement, the commit) it rolls
        back and the queue stays as it was; failures that mean "not now" are
        raised as :class:`StoreUnavailable`.
        """
        with self._lock:
            self._start()
            try:
                written = self._write_pending()
                yield self._db
                self._db.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                if (
                    isinstance(exc, Exception)
                    and not isinstance(exc, StoreError)
                    and self._transient(exc)
                ):
                    raise StoreUnavailable(self._problem(exc)) from exc
                raise
            self._forget(written)

    def _write_pending(self) -> int:
        """Write the queued rows; returns how many (a row that cannot be written is set aside)."""
        index = 0
        while index < len(self._pending):
            entry = self._pending[index]
            try:
                if callable(entry):
                    entry(self._db)
                else:
                    self._db.execute(*entry)
            except Exception as exc:
                if self._transient(exc):
                    raise
                # This row can never be written; the rows after it must not wait for it.
                self._rollback()
                self._set_aside(index, exc)
                self._start()
                index = 0
                continue
            index += 1
        return index

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

    _EVENT_SQL = "INSERT INTO events (session_id, call_id, kind, at, data) VALUES (?, ?, ?, ?, ?)"

    def _event_params(self, event: Event) -> tuple[Any, ...]:
        at = event.at + self.clock_offset
        return (event.session_id, event.call_id, event.kind, at, json.dumps(event.data))

    def _insert_event(self, db: sqlite3.Connection, event: Event) -> int:
        cur = db.execute(*self._event_entry(event))
        return int(cur.lastrowid or 0)

    _OWNED_EVENT_SQL = (
        "INSERT INTO events (session_id, call_id, kind, at, data) SELECT ?, ?, ?, ?, ?"
        " WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = ? AND s.owner = ?)"
    )
    """An event of a session this process holds: written only while it still holds it."""

    def _event_entry(self, event: Event) -> tuple[str, tuple[Any, ...]]:
        """The statement writing ``event``: fenced by its owner when this process holds it."""
        owner = self._owner(event.session_id)
        if owner is None:
            return self._EVENT_SQL, self._event_params(event)
        return self._OWNED_EVENT_SQL, (*self._event_params(event), event.session_id, owner)

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

    # Sessions -----------------------------------------------------------------

    def create_session(
        self,
        session_id: str,
        agent: str,
        workspace: str,
        parent_call_id: str | None = None,
        model: str | None = None,
        title: str | None = None,
        *,
        owner: str | None = None,
    ) -> SessionRecord:
        """A new session; with ``owner`` (a worker id) it is created leased to that worker."""
        state = "running" if owner is not None else None
        record = SessionRecord(
            session_id, self.clock(), agent, workspace, parent_call_id, model, title, owner, state
        )
        with self._tx() as db:
            db.execute(
                "INSERT INTO sessions (session_id, created_at, agent, workspace, parent_call_id,"
                " model, title, owner, state, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, zuno_now())",
                (
                    session_id,
                    record.created_at,
                    agent,
                    workspace,
                    parent_call_id,
                    model,
                    title,
                    owner,
                    state,
                ),
            )
        return record

    def _session_select(self) -> str:
        return (
            f"SELECT {self._session_columns},"
            " (SELECT COUNT(DISTINCT call_id) FROM calls c WHERE c.session_id = s.session_id)"
            " FROM sessions s"
        )

    @staticmethod
    def _session(row: Sequence[Any]) -> SessionRecord:
        *fields, calls = tuple(row)
        return SessionRecord(*fields, calls=calls)

    def get_session(self, session_id: str) -> SessionRecord | None:
        self.flush()
        with self._lock:
            row = self._db.execute(
                self._session_select() + " WHERE s.session_id = ?", (session_id,)
            ).fetchone()
        return self._session(row) if row else None

    def find_sessions(self, prefix: str) -> list[str]:
        """Session ids starting with ``prefix`` (so people can type a short id).

        A range on the id in code point order (the primary key on SQLite, the
        ``COLLATE "C"`` index on PostgreSQL), not a scan.
        """
        self.flush()
        # Ids hold neither; earlier versions read them as LIKE wildcards and dropped them.
        prefix = prefix.replace("%", "").replace("\\", "")
        upper = _next_text(prefix)
        sql = 'SELECT session_id FROM sessions WHERE session_id /*pg: COLLATE "C"*/ >= ?'
        params: tuple[Any, ...] = (prefix,)
        if upper is not None:
            sql += ' AND session_id /*pg: COLLATE "C"*/ < ?'
            params += (upper,)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY created_at", params).fetchall()
        return [r[0] for r in rows]

    def list_sessions(self, limit: int = 1000) -> list[SessionRecord]:
        """Sessions, newest first."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                self._session_select() + " ORDER BY s.created_at DESC, s.rowid DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [self._session(r) for r in rows]

    def acquire_session(self, session_id: str, worker_id: str) -> SessionRecord:
        """Lease the session to ``worker_id``: free, already its own, or its owner's lease expired.

        Raises:
            SessionBusy: Another worker holds it and is alive (its lease has not
                expired, or its process runs on this machine).
            StoreError: There is no such session.
        """
        with self._tx() as db:
            row = db.execute(
                "SELECT s.owner, s.state, s.updated_at, w.host, w.pid, w.expires_at"
                " FROM sessions s LEFT JOIN workers w ON w.worker_id = s.owner"
                " WHERE s.session_id = ? /*pg: FOR UPDATE OF s*/",
                (session_id,),
            ).fetchone()
            if row is None:
                raise StoreError(f"no session {session_id!r}: `zuno sessions` lists them")
            owner, state, since, host, pid, expires_at = tuple(row)
            if (
                owner is not None
                and owner != worker_id
                and state == "running"
                and not settleable_in(db, owner, single_host=self.single_host)
            ):
                raise SessionBusy(
                    _busy_message(session_id, owner, host, pid, since, expires_at),
                    session_id,
                    owner,
                    expires_at,
                )
            db.execute(
                "UPDATE sessions SET owner = ?, state = 'running', updated_at = zuno_now()"
                " WHERE session_id = ?",
                (worker_id, session_id),
            )
        with self._lock:
            self._lost.pop(session_id, None)
            self._owned[session_id] = worker_id
            self._orders.pop(session_id, None)  # another holder may have gone on meanwhile
        record = self.get_session(session_id)
        assert record is not None
        return record

    def release_session(self, session_id: str, worker_id: str, state: str = "idle") -> bool:
        """Give the session up (``state``: idle, done, failed, queued); False if it was not ours.

        ``idle`` (a runtime closing) only ends a ``running`` lease: a session a
        worker already marked ``done`` or ``failed`` keeps that state.
        """
        if session_id in self._lost:
            return False  # its lease lapsed: another worker may hold it by now
        with self._tx() as db:
            ending = self._answered_state(db, session_id) if state == "idle" else state
            row = db.execute(
                "UPDATE sessions SET state = ?, updated_at = zuno_now()"
                " WHERE session_id = ? AND owner = ? AND (state = 'running' OR ? <> 'idle')"
                " RETURNING session_id",
                (ending, session_id, worker_id, state),
            ).fetchone()
        with self._lock:
            if self._owned.get(session_id) == worker_id:
                del self._owned[session_id]
        return row is not None

    @staticmethod
    def _answered_state(db: sqlite3.Connection, session_id: str) -> str:
        """``done`` for a submitted session whose model gave its answer, else ``idle``.

        A person may finish a submitted session with ``zuno resume``: once answered,
        it is done for the fleet too, not an idle interactive session.
        """
        row = db.execute(
            "SELECT s.prompt IS NOT NULL, m.role, m.body FROM sessions s"
            " LEFT JOIN messages m ON m.session_id = s.session_id AND m.seq ="
            " (SELECT MAX(seq) FROM messages WHERE session_id = s.session_id)"
            " WHERE s.session_id = ?",
            (session_id,),
        ).fetchone()
        if row is None or not row[0] or row[1] != "assistant":
            return "idle"
        try:
            body = json.loads(row[2])
        except (TypeError, ValueError):
            return "idle"
        return "idle" if isinstance(body, dict) and body.get("tool_calls") else "done"  # pyright: ignore[reportUnknownMemberType]

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

    def child_sessions(self, session_id: str) -> list[SessionRecord]:
        """Sessions started by calls of this session (delegations)."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT s.session_id FROM sessions s JOIN calls c"
                " ON s.parent_call_id = c.call_id WHERE c.session_id = ?"
                " ORDER BY s.session_id",
                (session_id,),
            ).fetchall()
        return [s for r in rows if (s := self.get_session(r[0])) is not None]

    def begin_step(
        self, session_id: str, event: Event | None = None, *, worker: str | None = None
    ) -> int:
        """Open the next model step of a session (with its opening event) and return its number.

        The number is allocated inside the write transaction (no cached maximum
        that another process could make stale), and a clash is an error, never
        skipped. With ``worker``, the step opens only while that worker holds the
        session (else :class:`SessionBusy`, and nothing is written).

        When the store's write lock is held elsewhere, the step still opens (its
        read-only calls can run): the number is read under the session's lease
        (only its holder opens steps) and the row waits for the next transaction.
        """
        if worker is not None:
            self._owner(session_id)  # a session lost by this process opens no step
        try:
            with self._tx() as db:
                if worker is not None:
                    self._fence(db, session_id, worker)
                row = db.execute(
                    "INSERT INTO steps (session_id, step, created_at)"
                    " SELECT ?, COALESCE(MAX(step), 0) + 1, ? FROM steps WHERE session_id = ?"
                    " RETURNING step",
                    (session_id, self.clock(), session_id),
                ).fetchone()
                step = int(row[0])
                if event is not None:
                    event.data["step"] = step
                    db.execute(*self._event_entry(event))
            return step
        except SessionBusy:
            raise
        except StoreUnavailable:
            pass
        with self._lock:
            if worker is not None:
                self._fence(self._db, session_id, worker)
            row = self._db.execute(
                "SELECT COALESCE(MAX(step), 0) FROM steps WHERE session_id = ?", (session_id,)
            ).fetchone()
            waiting = [
                int(entry[1][1])
                for entry in self._pending
                if not callable(entry)
                and entry[0] == _DEFERRED_STEP_SQL
                and entry[1][0] == session_id
            ]
            step = max([int(row[0]), *waiting]) + 1
            # A plain INSERT: a clash is set aside with a warning, never silently skipped.
            self._defer(_DEFERRED_STEP_SQL, (session_id, step, self.clock()))
            if event is not None:
                event.data["step"] = step
                self._defer(*self._event_entry(event))
        return step

    # Calls ----------------------------------------------------------------------

    _CALL_SQL = (
        f"INSERT INTO calls ({_CALL_COLUMNS}) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    def _on_clock(self, at: float | None) -> float | None:
        """A local time as the database's clock reads it."""
        return None if at is None else at + self.clock_offset

    def _call_params(self, call: CallRecord) -> tuple[Any, ...]:
        return (
            call.call_id,
            call.session_id,
            call.step,
            call.index,
            call.attempt,
            call.tool,
            call.arguments,
            call.args_hash,
            call.effect,
            call.replay,
            call.concurrency,
            call.status,
            call.outcome,
            call.block_kind,
            call.result,
            int(call.is_error),
            self._on_clock(call.started_at),
            self._on_clock(call.finished_at),
            call.artifact,
            call.model_call_id,
            call.runner,
            call.reason,
            call.snapshot,
            call.mode,
            call.start_seq,
            call.finish_seq,
        )

    def _finish_params(self, call: CallRecord) -> tuple[Any, ...]:
        """The parameters of a guarded result: its columns, then the row's key."""
        return (
            call.outcome,
            call.block_kind,
            call.result,
            int(call.is_error),
            self._on_clock(call.finished_at),
            call.artifact,
            call.reason,
            call.finish_seq,
            call.call_id,
            call.attempt,
        )

    def _insert_call(self, db: sqlite3.Connection, call: CallRecord) -> None:
        db.execute(self._CALL_SQL, self._call_params(call))

    def record_blocked(self, call: CallRecord, event: Event) -> None:
        """A refused call: its event, then its finished ``blocked`` row.

        Deferred to the next transaction (at the latest the end of the step):
        a blocked call changed nothing, so nothing else waits on it.
        """
        with self._lock:
            self._defer(*self._event_entry(event))
            self._defer(self._CALL_SQL, self._call_params(call))

    def call_started(
        self, call: CallRecord, event: Event, *, durable: bool = True, fence: bool = False
    ) -> None:
        """Intent before effect: the ``started`` row is committed before the call runs.

        ``durable=False`` defers the row to the next transaction (the call's own
        result, at the latest): for read-only calls, which have no effect to
        precede, this saves a commit per call (their step's opening was fenced).
        ``fence``: insert the row only while the session is leased to
        ``call.runner`` (else :class:`SessionBusy`: the call must not run).
        """
        if not durable:
            with self._lock:
                self._deferred_calls[(call.call_id, call.attempt)] = len(self._pending)
                self._defer(self._CALL_SQL, self._call_params(call))
                self._defer(*self._event_entry(event))
            return
        if fence:
            self._owner(call.session_id)  # a session lost by this process runs nothing
        with self._tx() as db:
            if fence and call.runner is not None:
                self._fence(db, call.session_id, call.runner)
            self._insert_call(db, call)
            self._insert_event(db, event)

    def call_finished(self, call: CallRecord, event: Event, *, commit: bool = True) -> None:
        """The result of an attempt, committed as soon as it is known.

        When the store cannot commit right now (its lock held elsewhere past the
        busy timeout), the result stays queued and is written with the next
        transaction: a call that ran is never recorded as not run.

        ``commit=False`` leaves the result queued for the caller's next
        :meth:`flush_or_keep` (or any transaction before it): the dispatcher
        commits the results of a step's read-only calls, which nothing waits
        on, together once they are all in, instead of one commit each.
        """
        with self._lock:
            slot = self._deferred_calls.pop((call.call_id, call.attempt), None)
            if slot is not None and slot < len(self._pending):
                # Its started row is still waiting: write the finished row in its
                # place, one insert instead of an insert and an update.
                self._pending[slot] = (self._CALL_SQL, self._call_params(call))
                self._defer(*self._event_entry(event))
            else:
                self._defer_call(self._guarded_finish(call, event))
            if commit:
                self.flush_or_keep()

    def _guarded_finish(
        self, call: CallRecord, event: Event
    ) -> Callable[[sqlite3.Connection], None]:
        """The write of a result over the call's ``started`` row, and only over that.

        If another worker settled the row meanwhile (it judged this worker
        gone), the row stays as settled and the result becomes a
        ``call.late_result`` event beside it.
        """
        finished = self._event_entry(event) if event.session_id not in self._lost else None
        update = self._finish_params(call)
        # A result of a session this process holds lands only while it still holds it;
        # one of a session it lost is only ever a late result.
        owner = self._owned.get(call.session_id)
        fence = _OWNER_FENCE if owner is not None else ""
        params = (*update, call.session_id, owner) if owner is not None else update
        late_at = event.at + self.clock_offset

        def finish(db: sqlite3.Connection) -> None:
            """UPDATE calls ... WHERE status = 'started' (a guarded result)"""
            row = None
            if finished is not None:
                row = db.execute(
                    "UPDATE calls SET status = 'finished', outcome = ?, block_kind = ?,"
                    " result = ?, is_error = ?, finished_at = ?, artifact = ?, reason = ?,"
                    " finish_seq = ?"
                    f" WHERE call_id = ? AND attempt = ? AND status = 'started'{fence}"
                    " RETURNING call_id",
                    params,
                ).fetchone()
            if row is None:
                found = db.execute(
                    "SELECT outcome FROM calls WHERE call_id = ? AND attempt = ?",
                    (call.call_id, call.attempt),
                ).fetchone()
                if found is not None or finished is None:
                    settled = str(found[0]) if found is not None else "None"
                    db.execute(self._EVENT_SQL, self._late_params(call, settled, late_at))
                    return
                # Its started row was never stored (set aside): the result is the row.
                db.execute(self._CALL_SQL, self._call_params(call))
            assert finished is not None
            db.execute(*finished)

        return finish

    @staticmethod
    def _late_params(call: CallRecord, settled_as: str, at: float) -> tuple[Any, ...]:
        text = call.result or ""
        data = {
            "attempt": call.attempt,
            "outcome": call.outcome,
            "is_error": call.is_error,
            "result": text if len(text) <= _PREVIEW else text[: _PREVIEW - 3] + "...",
            "runner": call.runner,
            "settled_as": settled_as,
        }
        return (call.session_id, call.call_id, "call.late_result", at, json.dumps(data))

    def calls(self, session_id: str) -> list[CallRecord]:
        """Every attempt of every call of a session, in the model's order."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                f"SELECT {self._call_columns} FROM calls WHERE session_id = ?"
                " ORDER BY step, idx, attempt",
                (session_id,),
            ).fetchall()
        return [_call(r) for r in rows]

    def unfinished_calls(self, session_id: str | None = None) -> list[CallRecord]:
        """Rows left ``started``: their outcome is unknown."""
        self.flush()
        with self._lock:
            if session_id is None:
                rows = self._db.execute(
                    f"SELECT {self._call_columns} FROM calls WHERE status = 'started'"
                ).fetchall()
            else:
                rows = self._db.execute(
                    f"SELECT {self._call_columns} FROM calls WHERE status = 'started'"
                    " AND session_id = ? ORDER BY step, idx, attempt",
                    (session_id,),
                ).fetchall()
        return [_call(r) for r in rows]

    # Events ---------------------------------------------------------------------

    def append_event(self, event: Event) -> int:
        with self._tx() as db:
            return self._insert_event(db, event)

    _RESULT_EVENT_SQL = (
        "INSERT INTO events (session_id, call_id, kind, at, data) SELECT ?, ?, ?, ?, ?"
        " WHERE NOT EXISTS (SELECT 1 FROM calls c WHERE c.call_id = ?"
        " AND c.status = 'finished' AND COALESCE(c.outcome, '') <> ?"
        " AND c.attempt = (SELECT MAX(attempt) FROM calls m WHERE m.call_id = c.call_id))"
    )
    """A ``call.result`` event, written unless the call's last row holds another outcome."""

    def append_events(
        self, events: list[Event], deliver: Callable[[Event], None] | None = None
    ) -> None:
        """Several events, in order, with the next transaction (then handed to ``deliver``).

        Used for the close of a step (``call.result`` and ``dispatch.finished``):
        the call rows they describe are already committed, so these ride along
        with the next write, a read, or :meth:`close`.
        """
        with self._lock:
            for event in events:
                if event.kind == "call.result" and event.call_id and "outcome" in event.data:
                    # The owner's claim of an outcome: kept out of the log when its
                    # row was settled otherwise meanwhile (call.late_result holds it).
                    params = (
                        *self._event_params(event),
                        event.call_id,
                        str(event.data.get("outcome") or ""),
                    )
                    owner = self._owner(event.session_id)
                    if owner is None:
                        self._defer(self._RESULT_EVENT_SQL, params)
                    else:
                        sql = self._RESULT_EVENT_SQL + _OWNER_FENCE
                        self._defer(sql, (*params, event.session_id, owner))
                else:
                    self._defer(*self._event_entry(event))
        if deliver is not None:
            for event in events:
                deliver(event)

    def events(self, session_id: str) -> list[EventRecord]:
        """The events of a session, in the order they were emitted."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, session_id, call_id, kind, at, data FROM events"
                " WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [EventRecord(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in rows]

    # Approvals ------------------------------------------------------------------

    def set_call_snapshot(self, call_id: str, attempt: int, snapshot: str) -> None:
        """Name the checkpoint taken before a call, written after its row.

        The first file call of a session may run before the workspace's first
        look ends (:mod:`zuno.workspace.checkpoints.early`); its checkpoint exists only then.
        A row that already names one keeps it.
        """
        with self._tx() as db:
            db.execute(
                "UPDATE calls SET snapshot = ? WHERE call_id = ? AND attempt = ?"
                " AND snapshot IS NULL",
                (snapshot, call_id, attempt),
            )

    def add_session_approval(self, session_id: str, fingerprint: str, tool: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO approvals (session_id, fingerprint, tool, at)"
                " VALUES (?, ?, ?, ?)",
                (session_id, fingerprint, tool, self.clock()),
            )

    def has_session_approval(self, session_id: str, fingerprint: str) -> bool:
        self.flush()
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM approvals WHERE session_id = ? AND fingerprint = ?",
                (session_id, fingerprint),
            ).fetchone()
        return row is not None

    # Messages (the conversation of the agent loop) ---------------------------

    def append_message(self, session_id: str, role: str, body: dict[str, Any]) -> int:
        """The session's next message (only while this process still holds the session).

        Raises:
            SessionBusy: This process held the session and lost it (nothing is written).
        """
        return self.append_messages(session_id, [(role, body)])[0]

    def append_messages(
        self, session_id: str, messages: Sequence[tuple[str, dict[str, Any]]]
    ) -> list[int]:
        """The session's next messages, in order, in one transaction; returns their numbers.

        The results of one model step are written together: one commit, not one each.

        Raises:
            SessionBusy: This process held the session and lost it (nothing is written).
        """
        owner = self._owner(session_id)
        with self._tx() as db:
            if owner is not None:
                self._fence(db, session_id, owner)
            row = db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            first, now = int(row[0]), self.clock()
            for offset, (role, body) in enumerate(messages):
                db.execute(
                    "INSERT INTO messages (session_id, seq, role, body, at) VALUES (?, ?, ?, ?, ?)",
                    (session_id, first + offset, role, json.dumps(body), now),
                )
        return list(range(first, first + len(messages)))

    def messages(self, session_id: str) -> list[tuple[str, dict[str, Any]]]:
        self.flush()
        with self._lock:
            rows = self._db.execute(
                "SELECT role, body FROM messages WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [(r[0], json.loads(r[1])) for r in rows]


def _busy_message(
    session_id: str,
    owner: str,
    host: str | None,
    pid: int | None,
    since: float | None,
    expires_at: float | None,
) -> str:
    """Who holds a session, since when, until when, and what to do."""
    who = WorkerIdentity.parse(owner)
    name = who.short if who is not None else owner
    where = f" on host {host}" if host else ""
    process = f", pid {pid}" if pid is not None else (f", pid {who.pid}" if who else "")
    held = f" since {iso(since)}" if since is not None else ""
    until = (
        f"; its lease expires at {iso(expires_at)} unless it is renewed"
        if expires_at is not None
        else ""
    )
    return (
        f"session {session_id} is in use by worker {name}{where}{process}{held}{until}: "
        "use --wait SECONDS, or try again after that"
    )
