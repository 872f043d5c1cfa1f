"""What a store's write transaction offers to modules that keep their own tables.

Both stores yield an object of this shape from ``store.transaction()``: the
SQLite store its ``sqlite3.Connection``, the PostgreSQL store a translator
that accepts the same SQL. Modules write SQLite's dialect (``?`` placeholders,
``INSERT OR IGNORE``, ``RETURNING``) and read rows with ``fetchone`` /
``fetchall``, or run one statement over many rows (``executemany``);
nothing else is promised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["StoreConnection", "StoreCursor"]


class StoreCursor(Protocol):
    """The rows of one statement."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class StoreConnection(Protocol):
    """A connection inside a write transaction."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> StoreCursor: ...

    def executemany(self, sql: str, parameters: Sequence[Sequence[Any]], /) -> object: ...
