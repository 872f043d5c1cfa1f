"""``zuno sessions``, ``show``, direct-call sessions and ``resume --move-to`` on PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))

from fake_api import FakeModelServer, Reply

ZUNO = [sys.executable, "-m", "zuno"]


def _zuno(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*ZUNO, *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _json(env: dict[str, str], cwd: Path, *args: str) -> Any:
    proc = _zuno(env, cwd, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_sessions_show_direct_calls_and_move_on_postgres(pg_dsn: str, tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / "notes.txt").write_text("notes\n")
    with FakeModelServer() as server:
        env = {
            **os.environ,
            "ZUNO_DB": pg_dsn,
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "sk-test",
        }
        one = _json(env, first, "call", "read", '{"path": "notes.txt"}')["session_id"]
        two = _json(env, first, "call", "glob", '{"pattern": "*"}')["session_id"]
        assert one == two
        assert [s["session_id"] for s in _json(env, first, "sessions")] == [one]
        assert _json(env, second, "sessions") == []
        assert [s["session_id"] for s in _json(env, second, "sessions", "--all")] == [one]

        server.enqueue(
            Reply(text="Reading.", tool_calls=[("c1", "read", '{"path": "notes.txt"}')]),
        )
        run = _zuno(env, first, "run", "Read the notes", "--model", "openai:m", "--max-steps", "1")
        assert run.returncode == 1, run.stderr
        (ran,) = [s for s in _json(env, first, "sessions") if s["session_id"] != one]
        assert ran["title"] == "Read the notes" and ran["model"] == "openai:m"
        server.enqueue(Reply(text="Read it here."))
        moved = _zuno(env, first, "resume", ran["session_id"], "--move-to", str(second))
        assert moved.returncode == 0, moved.stderr
        assert [s["session_id"] for s in _json(env, second, "sessions")] == [ran["session_id"]]
        shown = _json(env, first, "show", ran["session_id"])
        assert shown["workspace"] == str(second.resolve())
        assert shown["prompt"] == "Read the notes"
        assert shown["final_answer"] == "Read it here."
        assert [s["text"] for s in shown["steps"]] == ["Reading.", "Read it here."]
