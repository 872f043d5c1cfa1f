"""One MCP server that cannot start takes only its own tools away, with one warning line.

Real servers: the demo server (tests/mcp/mcp_demo_server.py) beside one that
exits at once with a message on stderr, and one whose command does not exist.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from zuno.config.loading import load_config
from zuno.config.trust import trust
from zuno.core.declarations import BlockKind, Outcome
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

DEMO = Path(__file__).with_name("mcp_demo_server.py")
ZUNO = Path(sys.executable).parent / "zuno"

pytestmark = pytest.mark.anyio

SERVERS: dict[str, Any] = {
    "good": {"command": sys.executable, "args": [str(DEMO)]},
    "broken": {
        "command": sys.executable,
        "args": ["-c", "import sys; sys.stderr.write('no licence key\\n'); sys.exit(3)"],
        "startup_timeout": 60,
    },
    "missing": {"command": "zuno-no-such-mcp-server"},
}


@pytest.fixture
def configured(workspace: Path) -> Path:
    (workspace / "notes.txt").write_text("kept notes\n")
    (workspace / "zuno.json").write_text(json.dumps({"mcp": {"servers": SERVERS}}))
    trust(workspace)  # MCP servers are started from a trusted folder only
    return workspace


def zuno(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ZUNO), *args],
        cwd=workspace,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=180,
    )


def warnings_about(stderr: str, server: str) -> list[str]:
    return [line for line in stderr.splitlines() if f"'{server}'" in line]


def test_read_works_and_each_failed_server_is_one_warning_line(configured: Path) -> None:
    proc = zuno(configured, "call", "read", '{"path": "notes.txt"}')
    assert proc.returncode == 0, proc.stderr
    assert "kept notes" in proc.stdout
    (broken,) = warnings_about(proc.stderr, "broken")
    assert "no licence key" in broken or "exit" in broken or "closed" in broken, broken
    (missing,) = warnings_about(proc.stderr, "missing")
    assert "zuno-no-such-mcp-server" in missing and "not found" in missing
    assert not warnings_about(proc.stderr, "good")


def test_the_working_servers_tools_still_run(configured: Path) -> None:
    proc = zuno(configured, "call", "mcp__good__lookup", '{"key": "k"}', "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "ok"
    gone = zuno(configured, "call", "mcp__broken__anything", "{}", "--json")
    assert gone.returncode == 1
    result = json.loads(gone.stdout)
    assert result["outcome"] == "blocked" and result["block_kind"] == "unavailable"


async def test_the_runtime_keeps_the_good_servers_tools(configured: Path, tmp_path: Path) -> None:
    config = load_config(configured)
    rt = Runtime(configured, config=config, db_path=tmp_path / "z.db", approver=ApproveAll())
    try:
        async with rt:
            names = rt.registry.names()
            assert any(n.startswith("mcp__good__") for n in names)
            assert not any(n.startswith(("mcp__broken__", "mcp__missing__")) for n in names)
            assert set(rt.mcp_failures) == {"broken", "missing"}
            session = rt.open_session()
            read = await rt.call(session, "read", {"path": "notes.txt"})
            assert read.outcome is Outcome.OK
            lookup = await rt.call(session, "mcp__good__lookup", {"key": "k"})
            assert lookup.outcome is Outcome.OK, lookup.output
            gone = await rt.call(session, "mcp__missing__x", {})
            assert gone.block_kind is BlockKind.UNAVAILABLE
    finally:
        rt.close()
