"""Shared fixtures: a runtime on a real SQLite file in a temporary folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Commands started by tests run in their own process, as without a command server
# (tests/cli/test_command_server.py tests the server). ZUNO_TEST_SERVER=on runs
# the whole suite through servers instead.
os.environ["ZUNO_SERVER"] = os.environ.get("ZUNO_TEST_SERVER", "off")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _isolated_config_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Keep the user's real config and data folders out of every test."""
    home = tmp_path_factory.mktemp("config-home")
    old = {k: os.environ.get(k) for k in ("ZUNO_CONFIG_HOME", "ZUNO_DB")}
    os.environ["ZUNO_CONFIG_HOME"] = str(home)
    os.environ["ZUNO_DB"] = str(home / "default.db")
    yield
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws
