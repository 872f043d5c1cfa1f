"""A PostgreSQL schema per test, for the tests that need a server.

The server is ``$ZUNO_TEST_POSTGRES`` (a ``postgresql://`` connection string),
else the one ``scripts/setup.sh`` started and wrote to
``.venv/zuno-test-postgres``. Without either, or when it does not answer, the
test is skipped; ``scripts/start_postgres.sh`` starts a local one and prints
its string.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["SKIP_REASON", "scratch_schema"]

SKIP_REASON = (
    "ZUNO_TEST_POSTGRES is not set (a postgresql:// connection string; "
    "scripts/start_postgres.sh starts a server and prints one)"
)


def _from_setup() -> str | None:
    saved = Path(__file__).resolve().parents[1] / ".venv" / "zuno-test-postgres"
    try:
        lines = saved.read_text().split()
    except OSError:
        return None
    return lines[-1] if lines else None


@contextmanager
def scratch_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str = "zuno_test"
) -> Iterator[str]:
    """A connection string whose ``search_path`` is a new, empty schema (dropped after)."""
    base = os.environ.get("ZUNO_TEST_POSTGRES") or _from_setup()
    if not base:
        pytest.skip(SKIP_REASON)
    if not base.startswith(("postgresql://", "postgres://")):
        pytest.fail(f"ZUNO_TEST_POSTGRES must be a postgresql:// URL, got {base!r}")
    import psycopg
    from psycopg import sql

    try:
        conn = psycopg.connect(base, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.skip(f"the PostgreSQL server does not answer ({exc}); {SKIP_REASON}")
    schema = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    monkeypatch.setenv("ZUNO_ARTIFACTS", str(tmp_path / "artifacts"))
    sep = "&" if "?" in base else "?"
    try:
        yield f"{base}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
