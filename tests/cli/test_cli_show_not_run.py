"""After a kill during a batch, ``zuno show`` lists the calls that never started as not run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ZUNO = [sys.executable, "-m", "zuno"]


def test_calls_a_kill_stopped_before_they_started_are_shown_as_not_run(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "notes.txt").write_text("alpha\n")
    db = tmp_path / "s.db"
    env = {**os.environ, "ZUNO_DB": str(db)}
    batch = tmp_path / "batch.json"
    batch.write_text(
        json.dumps(
            [
                {"tool": "read", "args": {"path": "notes.txt"}},
                {"tool": "shell", "args": {"command": "echo started > marker; sleep 60"}},
                {"tool": "write", "args": {"path": "late.txt", "content": "never\n"}},
                {"tool": "read", "args": {"path": "late.txt"}},
            ]
        )
    )
    proc = subprocess.Popen(
        [*ZUNO, "batch", str(batch), "--yes", "--json"],
        cwd=workspace,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the kill takes the command's processes too
    )
    marker = workspace / "marker"
    for _ in range(1200):
        if marker.exists():
            break
        time.sleep(0.05)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("the shell call never started")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.stderr is not None
    proc.stderr.close()
    assert not (workspace / "late.txt").exists()

    (session,) = json.loads(
        subprocess.run(
            [*ZUNO, "sessions", "--json"],
            cwd=workspace,  # sessions lists the current folder's
            env=env,
            capture_output=True,
            timeout=120,
            check=True,
        ).stdout
    )
    shown = subprocess.run(
        [*ZUNO, "show", session["session_id"], "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    body = json.loads(shown.stdout)
    assert [(c["index"], c["tool"], c["outcome"]) for c in body["calls"]] == [
        (0, "read", "ok"),
        (1, "shell", "uncertain"),
    ]
    assert [(n["step"], n["index"], n["tool"]) for n in body["not_run"]] == [
        (1, 2, "write"),
        (1, 3, "read"),
    ]
    assert "late.txt" in body["not_run"][0]["arguments"]

    text = subprocess.run(
        [*ZUNO, "show", session["session_id"]], env=env, capture_output=True, text=True, timeout=120
    ).stdout
    lines = [line.strip() for line in text.splitlines()]
    write = next(i for i, line in enumerate(lines) if line.startswith("#2 write"))
    assert "not run" in lines[write] and lines[write + 1].startswith("args:")
    assert lines[write + 2].startswith("#3 read") and "not run" in lines[write + 2]
