"""PostgreSQL fixtures: each test gets its own schema (see tests/pg_schema.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pg_schema import SKIP_REASON, scratch_schema

__all__ = ["SKIP_REASON", "pg_dsn"]


@pytest.fixture
def pg_dsn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A connection string whose ``search_path`` is a new, empty schema."""
    with scratch_schema(tmp_path, monkeypatch) as dsn:
        yield dsn
