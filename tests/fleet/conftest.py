"""Fleet fixtures: a PostgreSQL schema per test (see tests/pg_schema.py) and the scripted model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_model import FleetModelServer

from pg_schema import scratch_schema


@pytest.fixture
def pg_dsn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A connection string whose ``search_path`` is a new, empty schema (dropped after)."""
    with scratch_schema(tmp_path, monkeypatch, prefix="zuno_fleet") as dsn:
        yield dsn


@pytest.fixture
def fleet_model() -> Iterator[FleetModelServer]:
    """The scripted model every worker of a test talks to."""
    with FleetModelServer() as server:
        yield server
