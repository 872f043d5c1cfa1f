"""Fixtures for the agent tests: the anyio backend and a scripted model server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_api import FakeModelServer


@pytest.fixture
def anyio_backend() -> str:
    """Run ``@pytest.mark.anyio`` tests on asyncio (the SDKs' home loop)."""
    return "asyncio"


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    """A running :class:`FakeModelServer` with an empty script (``enqueue`` replies)."""
    with FakeModelServer() as server:
        yield server
