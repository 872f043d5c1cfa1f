"""The SQLite dialect of Zuno's SQL, rewritten for PostgreSQL.

Modules that keep their own tables (jobs, recovery, memory, work state) write
SQLite SQL through ``store.transaction()`` and ``store.query()``. On a
PostgreSQL store each statement passes through :func:`to_postgres`, which
rewrites exactly the constructs this codebase uses, and nothing else:

- ``?`` placeholders become ``%s``; every literal ``%`` becomes ``%%``;
- ``x IS ?`` becomes ``x IS NOT DISTINCT FROM %s`` (PostgreSQL's ``IS`` takes
  only NULL, TRUE or FALSE);
- ``INSERT OR IGNORE INTO`` becomes ``INSERT INTO ... ON CONFLICT DO NOTHING``;
- ``INSERT OR REPLACE INTO t (cols) VALUES (...)`` becomes an upsert on the
  table's primary key, which the caller supplies;
- in ``ON CONFLICT ... DO UPDATE SET``, ``c = c + 1`` names the table's row
  (``c = t.c + 1``): bare, PostgreSQL finds ``c`` ambiguous;
- in ``CREATE TABLE``: ``INTEGER PRIMARY KEY [AUTOINCREMENT]`` (a rowid alias)
  becomes ``BIGSERIAL PRIMARY KEY``, ``REAL`` becomes ``DOUBLE PRECISION``
  (PostgreSQL's ``REAL`` is four bytes: it would round timestamps to minutes),
  and ``WITHOUT ROWID`` goes;
- ``zuno_now()`` (the database's clock in seconds, which the SQLite store
  registers as a function) becomes ``EXTRACT(EPOCH FROM clock_timestamp())``:
  the clock at the moment of the statement, not of the transaction's start;
- a PostgreSQL-only clause written as a comment, ``/*pg: FOR UPDATE*/``, is
  unwrapped (SQLite reads it as a comment and ignores it).

Apart from ``%``, text inside single quotes is never rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

__all__ = ["NOW_SQL", "to_postgres"]

_INSERT_OR = re.compile(r"^\s*INSERT\s+OR\s+(IGNORE|REPLACE)\s+INTO\s+", re.IGNORECASE)
_INSERT_INTO = re.compile(r"^\s*INSERT\s+INTO\s+(\w+)", re.IGNORECASE)
_COLUMNS = re.compile(r"^\s*INSERT\s+INTO\s+\w+\s*\(([^)]*)\)", re.IGNORECASE)
_RETURNING = re.compile(r"\sRETURNING\s", re.IGNORECASE)
_DO_UPDATE = re.compile(r"\bDO\s+UPDATE\s+SET\b", re.IGNORECASE)
_INCREMENT = re.compile(r"\b(\w+)\s*=\s*\1\s*\+")
_IS_PARAM = re.compile(r"\bIS\s+\?", re.IGNORECASE)
_CREATE_TABLE = re.compile(r"^\s*CREATE\s+TABLE\b", re.IGNORECASE)
_ROWID_ALIAS = re.compile(r"\bINTEGER\s+PRIMARY\s+KEY(\s+AUTOINCREMENT)?\b", re.IGNORECASE)
_REAL = re.compile(r"\bREAL\b", re.IGNORECASE)
_WITHOUT_ROWID = re.compile(r"\s*\bWITHOUT\s+ROWID\b", re.IGNORECASE)
_NOW = re.compile(r"\bzuno_now\s*\(\s*\)", re.IGNORECASE)
_PG_ONLY = re.compile(r"/\*pg:\s*(.*?)\s*\*/", re.DOTALL)

NOW_SQL = "EXTRACT(EPOCH FROM clock_timestamp())::float8"
"""``zuno_now()`` in PostgreSQL: seconds since the epoch, read when the statement runs."""


def _outside_quotes(sql: str, rewrite: Callable[[str], str]) -> str:
    # Even pieces of a split on ' are outside string literals ('' included).
    parts = sql.split("'")
    return "'".join(rewrite(p) if i % 2 == 0 else p for i, p in enumerate(parts))


def _before_returning(sql: str, clause: str) -> str:
    match = _RETURNING.search(sql)
    if match is None:
        return f"{sql} {clause}"
    return f"{sql[: match.start()]} {clause}{sql[match.start() :]}"


def to_postgres(sql: str, primary_key: Callable[[str], Sequence[str]]) -> str:
    """``sql`` in PostgreSQL's dialect.

    Args:
        sql: A statement in the SQLite dialect used by Zuno's modules.
        primary_key: The primary-key columns of a table (for ``INSERT OR REPLACE``).

    Raises:
        ValueError: For an ``INSERT OR REPLACE`` without a column list.
    """
    sql = _outside_quotes(sql, lambda piece: _PG_ONLY.sub(r"\1", piece))
    if _CREATE_TABLE.match(sql):

        def ddl(piece: str) -> str:
            piece = _ROWID_ALIAS.sub("BIGSERIAL PRIMARY KEY", piece)
            piece = _REAL.sub("DOUBLE PRECISION", piece)
            return _WITHOUT_ROWID.sub("", piece)

        sql = _outside_quotes(sql, ddl)
    conflict = ""
    match = _INSERT_OR.match(sql)
    if match is not None:
        verb = match.group(1).upper()
        sql = "INSERT INTO " + sql[match.end() :]
        if verb == "IGNORE":
            conflict = "ON CONFLICT DO NOTHING"
        else:
            table = _INSERT_INTO.match(sql)
            columns = _COLUMNS.match(sql)
            if table is None or columns is None:
                raise ValueError(f"INSERT OR REPLACE needs a column list: {sql}")
            keys = list(primary_key(table.group(1)))
            names = [c.strip() for c in columns.group(1).split(",")]
            sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in names if c not in keys)
            action = f"DO UPDATE SET {sets}" if sets else "DO NOTHING"
            conflict = f"ON CONFLICT ({', '.join(keys)}) {action}"
    table = _INSERT_INTO.match(sql)

    def body(piece: str) -> str:
        update = _DO_UPDATE.search(piece)
        if update is not None and table is not None:
            name = table.group(1)
            tail = _INCREMENT.sub(
                lambda m: f"{m.group(1)} = {name}.{m.group(1)} +", piece[update.end() :]
            )
            piece = piece[: update.end()] + tail
        piece = _IS_PARAM.sub("IS NOT DISTINCT FROM ?", piece)
        return _NOW.sub(NOW_SQL, piece.replace("?", "%s"))

    # psycopg reads % anywhere, quoted or not.
    sql = _outside_quotes(sql.replace("%", "%%"), body)
    return _before_returning(sql, conflict) if conflict else sql
