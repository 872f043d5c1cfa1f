"""The SQLite store: one file, WAL mode, one short transaction per write.

Durability: with WAL and ``synchronous=NORMAL`` a committed transaction
survives a crash of the process (``kill -9``); only a power loss can take the
last ones back. A transaction is ``BEGIN IMMEDIATE``: it holds the file's
write lock from its start, waiting up to the busy timeout for another process
to let it go.

The store itself (its statements, its queue, its leases) is
:class:`~zuno.durability.store.transcript.SQLStore`; this module opens the
file and runs its transactions. Times of leases are the database's clock,
``zuno_now()``, registered on every connection as this machine's clock (one
host shares the file).

A reading open (``migrate=False``) uses a read-only connection for an older
store, and creates no file where there is none.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Generator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

from zuno.durability.store.errors import StoreError, StoreUnavailable
from zuno.durability.store.sqlite_dialect import SQLiteDialect
from zuno.durability.store.storable import storable_params
from zuno.durability.store.transcript import SQLStore

__all__ = ["SQLiteStore"]


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


class SQLiteStore(SQLStore):
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

    def __init__(self, path: Path, *, migrate: bool = True, busy_timeout: float = 30.0) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.single_host = True
        self.dialect = SQLiteDialect(busy_timeout)
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

    def _where(self) -> str:
        """The store, as a person named it."""
        return str(self.path)

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
