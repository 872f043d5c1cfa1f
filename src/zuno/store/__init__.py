"""The durable store: sessions, steps, calls, events, approvals, messages.

The store is the source of truth for every transcript. SQLite (one file, WAL)
is the default; its location is ``ZUNO_DB`` or ``--db``, else the platform's
data folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from zuno.store.records import CallRecord, EventRecord, SessionRecord
from zuno.store.sqlite import SQLiteStore

__all__ = [
    "CallRecord",
    "EventRecord",
    "SQLiteStore",
    "SessionRecord",
    "Store",
    "default_db_path",
    "open_store",
]

Store = SQLiteStore


def default_db_path() -> Path:
    """``$ZUNO_DB``, else ``zuno.db`` in the platform's data folder."""
    env = os.environ.get("ZUNO_DB")
    if env:
        return Path(env)
    return Path(platformdirs.user_data_dir("zuno")) / "zuno.db"


def open_store(path: Path | None = None) -> Store:
    """Open (creating when needed) the store at ``path`` or the default location."""
    return SQLiteStore(path or default_db_path())
