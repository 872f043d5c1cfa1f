"""SQLite's side of the store's dialect: its catalog and what its errors mean.

The statements themselves need no rewriting here (Zuno writes SQLite's
dialect); the clock, ``zuno_now()``, is a function the store registers on each
connection (:class:`~zuno.durability.store.sqlite.SQLiteStore`).
"""

from __future__ import annotations

import sqlite3

from zuno.durability.store.errors import StoreError

__all__ = ["SQLiteDialect"]

# SQLite's primary result codes that say "not now" rather than "not this row":
# busy, locked, out of memory, read-only, interrupted, I/O, corrupt, full,
# cannot open, protocol, not a database.
_TRANSIENT_CODES = frozenset({5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 26})


class SQLiteDialect:
    """The catalog and errors of a SQLite file.

    Args:
        busy_timeout: Seconds a transaction waits for another process's write
            lock (named when the lock was not obtained).
    """

    single_host = True
    """A SQLite file is shared only by the processes of one machine."""

    def __init__(self, busy_timeout: float) -> None:
        self.busy_timeout = busy_timeout

    def tables(self, db: sqlite3.Connection) -> set[str]:
        """The names of the tables the file holds."""
        rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {str(r[0]) for r in rows}

    def columns(self, db: sqlite3.Connection, table: str) -> set[str]:
        """The names of ``table``'s columns."""
        return {str(row[1]) for row in db.execute(f"PRAGMA table_info({table})")}

    def transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` says "not now" (the whole transaction) rather than "not this row"."""
        if isinstance(exc, StoreError):
            return True
        code = getattr(exc, "sqlite_errorcode", None)
        return isinstance(exc, sqlite3.DatabaseError) and (code or 0) & 0xFF in _TRANSIENT_CODES

    def problem(self, exc: Exception, where: str) -> str:
        """What went wrong with the store at ``where``, in one line a person can act on."""
        code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
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
