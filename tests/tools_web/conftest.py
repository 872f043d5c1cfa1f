"""Fixtures of the web tool tests: a local server and runtimes configured for it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from web_test_server import LocalServer, running_server

from zuno.config.loading import Config
from zuno.policy.approvals import DenyAll
from zuno.session.builtin_tools import builtin_tools
from zuno.session.runtime import Runtime


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with running_server() as srv:
        yield srv


RuntimeFactory = Callable[..., Runtime]


@pytest.fixture
def make_runtime(workspace: Path, tmp_path: Path) -> RuntimeFactory:
    """A runtime with the built-in tools, strict mode and an approver that denies all.

    Strict mode asks before a fetch from a host ``web.allowed_domains`` does not
    list, so a rule allows webfetch everywhere: the fetches here must run without
    anyone to approve them. ``web`` settings are merged over a default that lets
    them reach the local test server.
    """

    def make(web: dict[str, Any] | None = None, **config: Any) -> Runtime:
        settings = {"allow_private_networks": True, **(web or {})}
        rules = [{"tool": "webfetch", "pattern": "*", "action": "allow"}]
        cfg = Config.model_validate(
            {
                "web": settings,
                "replay": {"base_delay": 0.0},
                "permission": {"mode": "strict", "rules": rules},
                **config,
            }
        )
        return Runtime(
            workspace,
            config=cfg,
            db_path=tmp_path / "zuno.db",
            approver=DenyAll(),
            tools=builtin_tools(cfg),
        )

    return make
