"""PostgreSQL's side of the store's dialect: its catalog and what its errors mean.

The statements Zuno writes in SQLite's dialect are rewritten for PostgreSQL by
:func:`zuno.durability.store.dialect.to_postgres`; the connection and the
pipelined transactions are :mod:`zuno.durability.store.pg_connection` and
:mod:`zuno.durability.store.pg_transactions`.
"""

from __future__ import annotations

import sqlite3

import psycopg

from zuno.durability.store.errors import StoreError

__all__ = ["PostgresDialect", "connection_loss", "first_line"]


def connection_loss(exc: BaseException) -> BaseException | None:
    """The earliest error in ``exc``'s chain saying the connection is gone, if any.

    Class 08 (connection exception) and 57P (the server shut the session down:
    ``pg_terminate_backend``, a restart). psycopg may report a later error
    (such as leaving pipeline mode with answers unread) over the first one.
    """
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 16:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for error in reversed(chain):
        state = getattr(error, "sqlstate", None) or ""
        if state.startswith(("08", "57P")):
            return error
    return None


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (its type's name when it has none)."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class PostgresDialect:
    """The catalog and errors of a PostgreSQL schema (the connection's ``current_schema()``)."""

    single_host = False
    """Workers of one PostgreSQL database may run on many machines."""

    def tables(self, db: sqlite3.Connection) -> set[str]:
        """The names of the tables in the current schema."""
        rows = db.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchall()
        return {str(r[0]) for r in rows}

    def columns(self, db: sqlite3.Connection, table: str) -> set[str]:
        """The names of ``table``'s columns."""
        rows = db.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ?",
            (table,),
        ).fetchall()
        return {str(r[0]) for r in rows}

    def transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` says "not now": a store error, or the server not answering."""
        return isinstance(exc, StoreError | psycopg.OperationalError | psycopg.InterfaceError)

    def problem(self, exc: Exception, where: str) -> str:
        """What went wrong with the server at ``where``, in one line a person can act on."""
        first = first_line(exc)
        if isinstance(exc, psycopg.OperationalError):
            return (
                f"cannot use PostgreSQL at {where} ({first}): check that the server "
                "runs and accepts this connection string (--db or ZUNO_DB)"
            )
        if isinstance(exc, psycopg.ProgrammingError) and "dsn" in first.lower():
            return f"the PostgreSQL connection string is not valid ({first}): check --db or ZUNO_DB"
        return f"the store {where} failed ({type(exc).__name__}: {first})"
