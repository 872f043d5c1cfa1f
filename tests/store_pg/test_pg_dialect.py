"""The SQLite-to-PostgreSQL rewriting of the statements Zuno's modules use (no server needed)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from zuno.durability.store.dialect import to_postgres


def keys(table: str) -> Sequence[str]:
    return {"work_goals": ("session_id",), "pairs": ("a", "b")}[table]


def pg(sql: str) -> str:
    return " ".join(to_postgres(sql, keys).split())


def test_placeholders_and_percent_signs() -> None:
    assert pg("SELECT a FROM t WHERE b = ? AND c LIKE ? ESCAPE '\\'") == (
        "SELECT a FROM t WHERE b = %s AND c LIKE %s ESCAPE '\\'"
    )
    # A ? inside a string literal is text; a % anywhere is escaped for psycopg.
    assert pg("SELECT '?%' || ? FROM t") == "SELECT '?%%' || %s FROM t"


def test_is_a_parameter_compares_nulls_as_sqlite_does() -> None:
    assert pg("SELECT 1 FROM m WHERE workspace IS ? AND x = ?") == (
        "SELECT 1 FROM m WHERE workspace IS NOT DISTINCT FROM %s AND x = %s"
    )
    unchanged = "SELECT 1 FROM m WHERE workspace IS NULL"
    assert pg(unchanged) == unchanged


def test_insert_or_ignore() -> None:
    assert pg("INSERT OR IGNORE INTO steps (a, b) VALUES (?, ?)") == (
        "INSERT INTO steps (a, b) VALUES (%s, %s) ON CONFLICT DO NOTHING"
    )


def test_insert_or_replace_is_an_upsert_on_the_primary_key() -> None:
    assert pg(
        "INSERT OR REPLACE INTO work_goals (session_id, objective, revision) VALUES (?, ?, ?)"
    ) == (
        "INSERT INTO work_goals (session_id, objective, revision) VALUES (%s, %s, %s)"
        " ON CONFLICT (session_id) DO UPDATE SET objective = EXCLUDED.objective,"
        " revision = EXCLUDED.revision"
    )
    assert pg("INSERT OR REPLACE INTO pairs (a, b) VALUES (?, ?)") == (
        "INSERT INTO pairs (a, b) VALUES (%s, %s) ON CONFLICT (a, b) DO NOTHING"
    )
    with pytest.raises(ValueError, match="column list"):
        pg("INSERT OR REPLACE INTO pairs VALUES (?, ?)")


def test_an_increment_in_an_upsert_names_the_stored_row() -> None:
    assert pg(
        "INSERT INTO work_plans (session_id, revision) VALUES (?, 1) ON CONFLICT (session_id)"
        " DO UPDATE SET revision = revision + 1, plan = excluded.plan RETURNING revision"
    ) == (
        "INSERT INTO work_plans (session_id, revision) VALUES (%s, 1) ON CONFLICT (session_id)"
        " DO UPDATE SET revision = work_plans.revision + 1, plan = excluded.plan"
        " RETURNING revision"
    )


def test_create_table() -> None:
    assert pg("CREATE TABLE IF NOT EXISTS e (seq INTEGER PRIMARY KEY, at REAL NOT NULL)") == (
        "CREATE TABLE IF NOT EXISTS e (seq BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION NOT NULL)"
    )
    assert pg("CREATE TABLE m (id INTEGER PRIMARY KEY AUTOINCREMENT, t TEXT)") == (
        "CREATE TABLE m (id BIGSERIAL PRIMARY KEY, t TEXT)"
    )
    assert pg("CREATE TABLE s (a TEXT, b INTEGER NOT NULL, PRIMARY KEY (a, b)) WITHOUT ROWID") == (
        "CREATE TABLE s (a TEXT, b INTEGER NOT NULL, PRIMARY KEY (a, b))"
    )
    # Outside CREATE TABLE, nothing of that is touched.
    assert pg("SELECT real FROM t") == "SELECT real FROM t"


def test_the_database_clock() -> None:
    # zuno_now() is the database's clock in seconds (a float), fresh at each call.
    assert pg("UPDATE workers SET heartbeat_at = zuno_now(), expires_at = zuno_now() + ?") == (
        "UPDATE workers SET heartbeat_at = EXTRACT(EPOCH FROM clock_timestamp())::float8,"
        " expires_at = EXTRACT(EPOCH FROM clock_timestamp())::float8 + %s"
    )
    assert pg("SELECT ZUNO_NOW ( )") == "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8"
    # Inside a string literal it is text.
    assert pg("SELECT 'zuno_now()'") == "SELECT 'zuno_now()'"


def test_a_postgresql_only_clause_is_unwrapped() -> None:
    assert pg(
        "SELECT s.session_id FROM sessions s WHERE state = ? ORDER BY created_at LIMIT 1"
        " /*pg: FOR UPDATE OF s SKIP LOCKED*/"
    ) == (
        "SELECT s.session_id FROM sessions s WHERE state = %s ORDER BY created_at LIMIT 1"
        " FOR UPDATE OF s SKIP LOCKED"
    )
    # Its placeholders are parameters like any other; spacing inside the comment is free.
    assert pg("SELECT 1 FROM t WHERE a = ? /*pg:AND b = ?*/") == (
        "SELECT 1 FROM t WHERE a = %s AND b = %s"
    )
    # An ordinary comment stays a comment.
    assert pg("SELECT 1 /* note */ FROM t") == "SELECT 1 /* note */ FROM t"
