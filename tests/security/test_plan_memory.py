"""Plan mode refuses ``memory_propose``: a proposal writes a row a person must review later.

Through the real ``zuno batch`` (no terminal, no ``--yes``): the call is refused by the
mode and ``zuno memory list`` shows no proposal afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

ZUNO = str(Path(sys.executable).with_name("zuno"))


def _zuno(workspace: Path, env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        [ZUNO, *args],
        cwd=workspace,
        env=env,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return proc.stdout + proc.stderr


def test_plan_mode_refuses_memory_propose(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "zuno.json").write_text(json.dumps({"memory": {"enabled": True}}))
    env = {**os.environ, "ZUNO_CONFIG_HOME": str(home), "ZUNO_DB": str(tmp_path / "z.db")}
    step = json.dumps([{"tool": "memory_propose", "args": {"text": "always run make lint first"}}])
    proc = subprocess.run(
        [ZUNO, "batch", "-", "--mode", "plan", "--json"],
        cwd=workspace,
        env=env,
        input=step,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = proc.stdout
    assert proc.returncode == 1, proc.stderr
    results: Any = json.loads(out)
    calls = cast(
        "list[dict[str, Any]]", results["results"] if isinstance(results, dict) else results
    )
    assert [(c["outcome"], c.get("block_kind")) for c in calls] == [("blocked", "denied")], out
    assert "plan mode" in calls[0]["result"]
    listed = _zuno(workspace, env, "memory", "list")
    assert "make lint" not in listed, listed
    # The same call outside plan mode does propose (the refusal above is the mode's).
    _zuno(workspace, env, "batch", "-", "--mode", "permissive", "--json", stdin=step)
    assert "make lint" in _zuno(workspace, env, "memory", "list")
