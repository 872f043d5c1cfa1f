"""The durable store: sessions, steps, calls, events, approvals, messages.

The store is the source of truth for every transcript. SQLite (one file, WAL)
is the default; its location is ``ZUNO_DB`` or ``--db``, else the platform's
data folder. A ``postgresql://`` (or ``postgres://``) connection string there
selects PostgreSQL, for several workers sharing one history.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import platformdirs

from zuno.durability.store.connection import StoreConnection, StoreCursor
from zuno.durability.store.errors import (
    SessionBusy,
    StoreError,
    StoreUnavailable,
    StoreVersionError,
)
from zuno.durability.store.records import CallRecord, EventRecord, SessionRecord
from zuno.durability.store.sqlite import SQLiteStore
from zuno.durability.store.transcript import SQLStore

__all__ = [
    "CallRecord",
    "EventRecord",
    "SQLiteStore",
    "SessionBusy",
    "SessionRecord",
    "Store",
    "StoreConnection",
    "StoreCursor",
    "StoreError",
    "StoreUnavailable",
    "StoreVersionError",
    "default_db_path",
    "open_store",
    "store_location",
]

Store = SQLStore
"""Either store (SQLite or PostgreSQL): the type the rest of Zuno works with."""


def default_db_path() -> Path:
    """``$ZUNO_DB``, else ``zuno.db`` in the platform's data folder."""
    env = os.environ.get("ZUNO_DB")
    if env:
        return Path(env)
    return Path(platformdirs.user_data_dir("zuno")) / "zuno.db"


_POSTGRES = re.compile(r"^(postgres(?:ql)?):/+", re.IGNORECASE)


def _postgres_dsn(location: str) -> str | None:
    """The connection string when ``location`` names PostgreSQL, else None.

    ``Path("postgresql://u@h/db")`` collapses ``//`` into ``/``, so the
    ``--db`` option arrives as ``postgresql:/u@h/db``: the slashes are put
    back (a DSN with an empty host, ``postgresql:///db``, survives only
    through ``ZUNO_DB``).
    """
    match = _POSTGRES.match(location)
    if match is None:
        return None
    if location.startswith("://", len(match.group(1))):
        return location
    return f"{match.group(1)}://{location[match.end() :]}"


def store_location(path: Path | str | None = None) -> str:
    """Where :func:`open_store` would open the store, as people read it (no password)."""
    location = str(path) if path is not None else os.environ.get("ZUNO_DB") or ""
    dsn = _postgres_dsn(location)
    if dsn is not None:
        from zuno.durability.store.pg_settings import describe_dsn

        return describe_dsn(dsn)
    return str(Path(path) if path is not None else default_db_path())


def open_store(path: Path | str | None = None, *, migrate: bool = True) -> Store:
    """Open the store at ``path`` or the default location.

    ``migrate`` (a writing command): create the store when needed and upgrade
    an older schema. False (a command that only reads): no schema change and
    no new file; an older store is read as it is.

    Raises:
        StoreUnavailable: It cannot be opened or reached (one line: what, what to do).
        StoreVersionError: Its schema is newer than this Zuno supports.
    """
    location = str(path) if path is not None else os.environ.get("ZUNO_DB") or ""
    dsn = _postgres_dsn(location)
    if dsn is not None:
        from zuno.durability.store.postgres import PostgresStore

        return PostgresStore(dsn, migrate=migrate)
    return SQLiteStore(Path(path) if path is not None else default_db_path(), migrate=migrate)
