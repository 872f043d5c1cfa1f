"""Saved outputs of other sessions are outside the workspace like anything else.

A truncated command result names its artifact, and the session that made it
may read it back without asking. Another session, here in another workspace
of the same user, must ask (and without a terminal it is refused): those
files hold whatever that session's commands printed. Through the real ``zuno``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ZUNO = str(Path(sys.executable).with_name("zuno"))


def _zuno(ws: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ZUNO, *args],
        cwd=ws,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_another_sessions_artifacts_ask_and_the_own_ones_do_not(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "zuno.json").write_text(json.dumps({"permission": {"mode": "strict"}}))
    env = {
        **os.environ,
        "ZUNO_CONFIG_HOME": str(home),
        "ZUNO_DB": str(tmp_path / "zuno.db"),
    }
    private, other = tmp_path / "private", tmp_path / "other"
    private.mkdir()
    other.mkdir()
    secret = "SECRET-OF-PRIVATE-7f3a"
    made = _zuno(
        private,
        env,
        "call",
        "shell",
        json.dumps({"command": f"seq 1 5000; echo {secret}"}),
        "--yes",
    )
    assert made.returncode == 0, made.stderr
    artifacts = tmp_path / "zuno-artifacts"
    saved = [
        p
        for p in artifacts.rglob("*.txt")
        if "checkpoints" not in p.parts and secret in p.read_text(errors="replace")
    ]
    assert saved, made.stdout
    target = str(saved[0])

    # The session that saved it reads it back unasked.
    own = _zuno(private, env, "call", "read", json.dumps({"path": target, "offset": 5000}))
    assert own.returncode == 0, own.stdout + own.stderr
    assert secret in own.stdout

    # Another workspace's session may not, by read or by grep.
    for tool, args in [
        ("read", {"path": target, "offset": 5000}),
        ("grep", {"pattern": secret, "path": str(artifacts)}),
        ("grep", {"pattern": secret, "path": target}),
    ]:
        proc = _zuno(other, env, "call", tool, json.dumps(args))
        assert secret not in proc.stdout, (tool, proc.stdout)
        assert proc.returncode != 0 and "outside the workspace" in proc.stdout, proc.stdout
