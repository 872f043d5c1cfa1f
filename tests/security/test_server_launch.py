"""The user's own hooks and servers never run the workspace's code.

A repository nobody trusted ships ``zhook.py``, ``zserver.py`` and
``node_modules/.bin/zfmt``; the user's own configuration names a hook
``python -m zhook``, a hook ``zfmt`` found on a PATH that lists
``node_modules/.bin``, and an MCP server ``python -m zserver``. Started with the
workspace as their folder, each ran the repository's file, outside the sandbox,
on a plain ``zuno call read``. The entries opt out of confinement
(``"sandbox": false``) so that only the folder, ``PYTHONSAFEPATH`` and ``PATH``
stand in the way. Through the real ``zuno``; judged by markers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ZUNO = str(Path(sys.executable).with_name("zuno"))


def test_user_hooks_and_servers_start_outside_the_workspace(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    ws = tmp_path / "repo"
    (ws / "node_modules" / ".bin").mkdir(parents=True)
    (ws / "README").write_text("hello\n")
    for name in ("zhook", "zserver"):
        (ws / f"{name}.py").write_text(
            f"import pathlib\npathlib.Path({str(marks / name)!r}).touch()\n"
        )
    fmt = ws / "node_modules" / ".bin" / "zfmt"
    fmt.write_text(f"#!/bin/sh\ntouch {marks / 'zfmt'}\n")
    fmt.chmod(0o755)
    seen = tmp_path / "seen.txt"
    python = sys.executable
    user = {
        "permission": {"mode": "permissive"},
        "hooks": {
            "before": [
                {"command": f"{python} -m zhook", "fail": "open", "sandbox": False},
                {"command": "zfmt", "fail": "open", "sandbox": False},
                {
                    "command": f'echo "$PWD|$ZUNO_WORKSPACE|$PYTHONSAFEPATH" > {seen}',
                    "sandbox": False,
                },
            ]
        },
        "mcp": {
            "servers": {"helper": {"command": python, "args": ["-m", "zserver"], "sandbox": False}}
        },
    }
    (home / "zuno.json").write_text(json.dumps(user))
    env = {
        **os.environ,
        "ZUNO_CONFIG_HOME": str(home),
        "ZUNO_DB": str(tmp_path / "zuno.db"),
        # A PATH as many people have it: the project's tools first.
        "PATH": f"./node_modules/.bin:{ws / 'node_modules' / '.bin'}:{os.environ['PATH']}",
    }
    proc = subprocess.run(
        [ZUNO, "call", "read", json.dumps({"path": "README"})],
        cwd=ws,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "hello" in proc.stdout, proc.stdout + proc.stderr
    assert sorted(p.name for p in marks.iterdir()) == []
    pwd, workspace, safe = seen.read_text().strip().split("|")
    assert workspace == str(ws) and safe == "1"
    assert not Path(pwd).resolve().is_relative_to(ws.resolve())
