"""Fixtures of the lsp tests: a Python workspace, runtimes, and servers closed afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from lsp_support import A_PY, B_PY, C_PY

from zuno.config.loading import Config
from zuno.integrations.lsp.pool import LSP_SERVERS
from zuno.policy.approvals import DenyAll
from zuno.session.builtin_tools import builtin_tools
from zuno.session.runtime import Runtime

RuntimeFactory = Callable[..., Runtime]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def py_workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A small Python project, shared by a module's tests (one pyright for all of them)."""
    ws = tmp_path_factory.mktemp("lsp-ws").resolve()
    (ws / "a.py").write_text(A_PY)
    (ws / "b.py").write_text(B_PY)
    (ws / "c.py").write_text(C_PY)
    yield ws
    anyio.run(LSP_SERVERS.aclose, ws)
    assert LSP_SERVERS.clients(ws) == []


@pytest.fixture
def fake_workspace(tmp_path: Path) -> Iterator[Path]:
    """An empty workspace whose servers are closed after the test."""
    ws = (tmp_path / "fake-ws").resolve()
    ws.mkdir()
    (ws / "m.fake").write_text("some text\n")
    yield ws
    anyio.run(LSP_SERVERS.aclose, ws)


@pytest.fixture
def make_runtime(tmp_path: Path) -> RuntimeFactory:
    """A runtime with the built-in tools, the lsp slot on, strict mode and a deny-all approver.

    The lsp tool is read-only, so it must run without any approval.
    """

    def make(workspace: Path, **config: Any) -> Runtime:
        cfg = Config.model_validate(
            {"tools": {"lsp": True}, "replay": {"base_delay": 0.0}, **config}
        )
        return Runtime(
            workspace,
            config=cfg,
            db_path=tmp_path / "zuno.db",
            approver=DenyAll(),
            tools=builtin_tools(cfg),
        )

    return make
