"""A runtime with the built-in tools connects the configured MCP servers itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zuno.config.loading import Config
from zuno.config.trust import trust
from zuno.core.declarations import Outcome
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

DEMO = Path(__file__).with_name("mcp_demo_server.py")


def _config(marks: Path) -> dict[str, object]:
    server = {
        "command": sys.executable,
        "args": [str(DEMO)],
        "env": {"DEMO_MARKS": str(marks)},
        "sandbox": False,  # it leaves marks outside the workspace
    }
    return {"mcp": {"servers": {"demo": server}}}


async def test_entering_the_runtime_adds_the_servers_tools_to_open_sessions(
    workspace: Path, tmp_path: Path
) -> None:
    rt = Runtime(
        workspace,
        config=Config.model_validate(_config(tmp_path / "marks")),
        db_path=tmp_path / "z.db",
        approver=ApproveAll(),
    )
    session = rt.open_session()
    assert "mcp__demo__lookup" not in session.surface.names
    async with rt:
        assert {"read", "mcp__demo__lookup", "mcp__demo__explode"} <= set(session.surface.names)
        result = await rt.call(session, "mcp__demo__lookup", {"key": "k"})
        assert result.outcome is Outcome.OK
        # Untrusted server: its read-only hint is ignored, the call stays strict.
        assert result.declaration is not None
        assert result.declaration.effect.value == "side_effecting"
    rt.close()


def test_zuno_call_reaches_a_configured_mcp_server(workspace: Path, tmp_path: Path) -> None:
    (workspace / "zuno.json").write_text(json.dumps(_config(tmp_path / "marks")))
    trust(workspace)  # MCP servers are started from a trusted folder only
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "zuno",
            "call",
            "mcp__demo__lookup",
            '{"key": "k"}',
            "--yes",
            "--json",
        ],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(tmp_path / "cli.db")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "ok"


def test_a_server_that_cannot_start_is_one_clear_line(workspace: Path, tmp_path: Path) -> None:
    config = {"mcp": {"servers": {"ghost": {"command": "no-such-mcp-server-here"}}}}
    (workspace / "zuno.json").write_text(json.dumps(config))
    trust(workspace)
    proc = subprocess.run(
        [sys.executable, "-m", "zuno", "call", "read", '{"path": "."}', "--json"],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(tmp_path / "cli.db")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Only the server's own tools are gone: read runs, with one warning line naming it.
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "ok"
    (warning,) = [line for line in proc.stderr.splitlines() if "ghost" in line]
    assert "not found" in warning
    assert "Traceback" not in proc.stderr
