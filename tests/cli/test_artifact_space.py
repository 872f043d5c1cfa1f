"""The disk artifacts take: a session's total cap, and ``zuno gc``.

Through the real command line and a real SQLite store. Age is made by moving
the store's clock columns and the files' times back, never by waiting.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from zuno.cli.gc import parse_size

ZUNO = [sys.executable, "-m", "zuno"]
_BIG = "head -c 700000 /dev/zero | tr '\\0' a"  # over the output limits: an artifact is kept
_HOLD = "echo holding; for i in $(seq 900); do [ -e release ] && break; sleep 0.1; done"


class _Cli:
    def __init__(self, workspace: Path, tmp_path: Path) -> None:
        self.ws = workspace
        self.db = tmp_path / "store.db"
        self.artifacts = tmp_path / "store-artifacts"
        self.env = {**os.environ, "ZUNO_DB": str(self.db), "ZUNO_SERVER": "off"}

    def run(self, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*ZUNO, *args], cwd=self.ws, env=self.env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == code, proc.stdout + proc.stderr
        return proc

    def shell(self, command: str, *extra: str) -> dict[str, Any]:
        args = json.dumps({"command": command})
        found: dict[str, Any] = json.loads(
            self.run("call", "shell", args, "--yes", "--json", *extra).stdout
        )
        return found

    def age(self, session_id: str, days: float) -> None:
        """Make a session look idle for ``days``: its row and its files."""
        then = time.time() - days * 86400
        with sqlite3.connect(self.db) as db:
            db.execute(
                "UPDATE sessions SET created_at = ?, updated_at = ? WHERE session_id = ?",
                (then, then, session_id),
            )
        folder = self.artifacts / session_id
        if folder.exists():  # a session that kept no artifact has no folder
            for path in [*folder.rglob("*"), folder]:
                os.utime(path, (then, then))


@pytest.fixture
def cli(workspace: Path, tmp_path: Path) -> _Cli:
    return _Cli(workspace, tmp_path)


def test_a_session_over_its_artifact_cap_loses_the_oldest_and_the_result_says_which(
    cli: _Cli,
) -> None:
    (cli.ws / "zuno.json").write_text(
        json.dumps({"tool_output": {"session_artifacts_max_bytes": 1048576}})
    )
    first = cli.shell(_BIG)
    kept = Path(first["data"]["stdout_artifact"])
    assert kept.stat().st_size == 700000
    os.utime(kept, (time.time() - 60, time.time() - 60))  # older than the next call
    second = cli.shell(_BIG)
    newest = Path(second["data"]["stdout_artifact"])
    # 1.4 MB do not fit 1 MiB: the first call's artifact went, the new one stays.
    assert not kept.exists() and newest.stat().st_size == 700000
    assert "session_artifacts_max_bytes" in second["result"]
    assert kept.name in second["result"]
    third = cli.shell("echo small")
    assert "session_artifacts_max_bytes" not in third["result"]


def test_gc_dry_run_lists_old_sessions_then_gc_removes_them_and_keeps_recent_ones(
    cli: _Cli,
) -> None:
    old = cli.shell(_BIG, "--new-session")
    recent = cli.shell(_BIG, "--new-session")
    old_id, recent_id = old["session_id"], recent["session_id"]
    cli.age(old_id, 40)
    listed = json.loads(cli.run("gc", "--older-than", "30", "--dry-run", "--json").stdout)
    paths = [r["path"] for r in listed["would_remove"]]
    assert str(cli.artifacts / old_id) in paths
    assert str(cli.artifacts / recent_id) not in paths
    assert (cli.artifacts / old_id).exists()  # a dry run removes nothing
    done = cli.run("gc", "--older-than", "30")
    assert "removed" in done.stdout and old_id in done.stdout
    assert not (cli.artifacts / old_id).exists()
    assert Path(recent["data"]["stdout_artifact"]).exists()
    # The transcript stays: show still tells what the old session did.
    assert "head -c 700000" in cli.run("show", old_id).stdout


def test_gc_never_touches_a_session_a_live_process_is_running(cli: _Cli) -> None:
    idle = cli.shell(_BIG, "--new-session")
    args = json.dumps({"command": _HOLD})
    running = subprocess.Popen(
        [*ZUNO, "call", "shell", args, "--yes", "--new-session", "--stream"],
        cwd=cli.ws,
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert running.stderr is not None
        assert running.stderr.readline()  # "approval for shell: once"
        assert running.stderr.readline() == b"holding\n"  # the command runs now
        with sqlite3.connect(cli.db) as db:
            busy = [
                str(r[0])
                for r in db.execute("SELECT session_id FROM sessions WHERE state = 'running'")
            ]
        assert len(busy) == 1
        report = json.loads(cli.run("gc", "--max-size", "0", "--json").stdout)
        removed = [r["path"] for r in report["removed"]]
        assert str(cli.artifacts / idle["session_id"]) in removed
        assert report["kept_in_use"] == busy
        assert (cli.artifacts / busy[0]).is_dir()
    finally:
        (cli.ws / "release").touch()
        running.communicate(timeout=120)
    assert running.returncode == 0


def test_gc_removes_a_workspace_checkpoints_only_with_its_last_session(cli: _Cli) -> None:
    cli.run("call", "write", json.dumps({"path": "a.txt", "content": "one\n"}), "--yes")
    stores = list((cli.artifacts / "checkpoints").glob("*.git"))
    assert len(stores) == 1
    with sqlite3.connect(cli.db) as db:
        (session_id,) = db.execute("SELECT session_id FROM sessions").fetchone()
    kept = cli.run("gc", "--older-than", "30", "--json")
    assert json.loads(kept.stdout)["removed"] == [] and stores[0].exists()
    cli.age(str(session_id), 40)
    report = json.loads(cli.run("gc", "--older-than", "30", "--json").stdout)
    assert str(stores[0]) in [r["path"] for r in report["removed"]]
    assert not stores[0].exists()


def test_sizes_read_as_people_write_them() -> None:
    assert parse_size("1048576") == 1 << 20
    assert parse_size("500M") == 500 << 20
    assert parse_size("1.5GiB") == 3 << 29
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


def test_a_bad_size_is_one_clear_line(cli: _Cli) -> None:
    proc = cli.run("gc", "--max-size", "lots", code=2)
    assert "--max-size" in proc.stderr and "Traceback" not in proc.stderr


def test_a_session_taken_up_after_the_plan_is_left_alone(cli: _Cli) -> None:
    from zuno.durability.artifact_space import plan_prune
    from zuno.durability.store import open_store
    from zuno.durability.workers import this_worker

    idle = cli.shell(_BIG, "--new-session")
    folder = cli.artifacts / idle["session_id"]
    store = open_store(cli.db)
    try:
        plan = plan_prune(store, now=time.time(), older_than_days=None, max_bytes=0)
        assert folder in [r.path for r in plan.removals]
        # A process (this one) takes the session up between the plan and the removal.
        with sqlite3.connect(cli.db) as db:
            db.execute(
                "UPDATE sessions SET state = 'running', owner = ? WHERE session_id = ?",
                (this_worker().id, idle["session_id"]),
            )
        assert plan.apply(store) == []
    finally:
        store.close()
    assert folder.is_dir() and plan.kept_busy == [idle["session_id"]]
    assert folder not in [r.path for r in plan.removals]
