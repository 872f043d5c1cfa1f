"""Hooks and stdio MCP servers run confined by default: no secrets, no writes outside.

Before, a hook or server ran outside any sandbox with the user's whole
environment (the provider's API key included): a hostile script a trusted
configuration named could read the key and write anywhere. Now each runs
under the same sandbox as ``shell`` (bubblewrap or Landlock), with the
secrets withheld; only the user's own file can opt an entry out with
``"sandbox": false``, a workspace file cannot. Through the real ``zuno``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

ZUNO = str(Path(sys.executable).with_name("zuno"))
DEMO_MCP = Path(__file__).parents[1] / "mcp" / "mcp_demo_server.py"
KINDS = ["bubblewrap", "landlock"]


def _probe(ws: Path, outside: Path, name: str) -> str:
    """Shell text that records the environment in the workspace and tries to write outside."""
    return f"env > {ws / (name + '.env')}; touch {outside / name}"


def _run(tmp_path: Path, kind: str, user: dict[str, Any], ws_config: dict[str, Any] | None):
    home, ws, outside = tmp_path / "home", tmp_path / "ws", tmp_path / "outside"
    for folder in (home, ws, outside):
        folder.mkdir(exist_ok=True)
    (ws / "README").write_text("hello\n")
    user = {"permission": {"mode": "permissive"}, "sandbox": {"kind": kind}, **user}
    (home / "zuno.json").write_text(json.dumps(user))
    secret = f"sk-canary-{uuid.uuid4().hex}"
    env = {
        **os.environ,
        "ZUNO_CONFIG_HOME": str(home),
        "ZUNO_DB": str(tmp_path / "zuno.db"),
        "OPENAI_API_KEY": secret,
    }
    if ws_config is not None:
        (ws / "zuno.json").write_text(json.dumps(ws_config))
        trusted = subprocess.run(
            [ZUNO, "trust", "--yes"], cwd=ws, env=env, capture_output=True, text=True, timeout=120
        )
        assert trusted.returncode == 0, trusted.stderr
    proc = subprocess.run(
        [ZUNO, "call", "read", json.dumps({"path": "README"})],
        cwd=ws,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "hello" in proc.stdout, proc.stdout + proc.stderr
    return ws, outside, secret, proc


def _mcp(ws: Path, outside: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "command": "/bin/sh",
        "args": [
            "-c",
            _probe(ws, outside, name) + '; exec "$0" "$1"',
            sys.executable,
            str(DEMO_MCP),
        ],
        **extra,
    }


@pytest.mark.parametrize("kind", KINDS)
def test_the_users_hooks_and_servers_run_confined_by_default(tmp_path: Path, kind: str) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    user = {
        "hooks": {"before": [{"command": _probe(ws, outside, "hook"), "fail": "open"}]},
        "mcp": {"servers": {"helper": _mcp(ws, outside, "server")}},
    }
    ws, outside, secret, proc = _run(tmp_path, kind, user, None)
    assert "failed to start" not in proc.stderr, proc.stderr
    for name in ("hook", "server"):
        seen = (ws / f"{name}.env").read_text()  # it ran, and wrote the workspace
        assert "ZUNO_WORKSPACE=" in seen
        assert secret not in seen, name
    assert sorted(p.name for p in outside.iterdir()) == []


@pytest.mark.parametrize("kind", KINDS)
def test_only_the_users_own_file_can_opt_out(tmp_path: Path, kind: str) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    user = {
        "hooks": {
            "after": [{"command": _probe(ws, outside, "mine"), "fail": "open", "sandbox": False}]
        }
    }
    workspace = {
        "hooks": {
            "before": [{"command": _probe(ws, outside, "theirs"), "fail": "open", "sandbox": False}]
        },
        "mcp": {"servers": {"theirs-server": _mcp(ws, outside, "theirs-server", sandbox=False)}},
    }
    ws, outside, secret, _ = _run(tmp_path, kind, user, workspace)
    # The user's opt-out holds: that hook ran as before, with the environment.
    assert sorted(p.name for p in outside.iterdir()) == ["mine"]
    assert secret in (ws / "mine.env").read_text()
    # The workspace file's opt-outs do not: its hook and server stayed confined.
    for name in ("theirs", "theirs-server"):
        assert secret not in (ws / f"{name}.env").read_text(), name
