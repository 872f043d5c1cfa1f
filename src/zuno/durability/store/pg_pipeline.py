"""What a pipelined PostgreSQL transaction carries while it is in flight.

The statements sent (and which queued row each one writes), the caller's own
statements (replayed when the transaction is written again), and the two
signals the machinery raises inside itself: the connection was lost, a queued
row was refused for good. Used by :mod:`zuno.durability.store.pg_transactions`.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, LiteralString

import psycopg

from zuno.durability.store.pg_connection import PgConnection, PgCursor

__all__ = ["Lost", "Sent", "SetAside", "Tx"]


class Lost(Exception):
    """The connection dropped in a transaction (``__cause__`` says why)."""


class SetAside(Exception):
    """A queued row the server refused for good, while the queue was being written."""

    def __init__(self, index: int, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.index = index
        self.error = error


@dataclass
class Sent:
    """One statement of a pipelined transaction."""

    sql: LiteralString
    params: tuple[Any, ...]
    entry: int | None
    """The queued row it writes; None for the caller's statements (and BEGIN, COMMIT)."""
    cursor: PgCursor | None = None


@dataclass
class Tx:
    """A transaction in flight on one connection, in pipeline mode."""

    conn: PgConnection
    seq: int
    """Its commit token: the store's transaction number."""
    stack: ExitStack
    sent: list[Sent] = field(default_factory=list[Sent])
    body: list[Sent] = field(default_factory=list[Sent])
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
