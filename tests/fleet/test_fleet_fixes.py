"""Smaller fleet fixes: what a missing file tells, what `doctor` prints, how sessions end.

- a ``read`` of a file that does not exist is an inspection (the absence is the state);
- ``zuno doctor`` names a PostgreSQL store as its URL, without the password;
- a submitted session that a person finishes with ``zuno resume`` ends ``done``;
- on one machine a killed worker's session is claimed by another worker of that
  machine at once, not after the lease.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fleet_model import FleetModelServer, prompt_for

from zuno.config.loading import Config
from zuno.core.declarations import BlockKind, Outcome
from zuno.durability.store import open_store
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

ZUNO = [sys.executable, "-m", "zuno"]
MODEL = "openai:fake-model"


@pytest.mark.anyio
async def test_a_read_of_a_missing_file_counts_as_an_inspection(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    rt = Runtime(
        workspace,
        config=Config.model_validate({}),
        db_path=tmp_path / "z.db",
        approver=ApproveAll(),
    )
    try:
        s = rt.open_session()
        lost = await rt.call(s, "shell", {"command": "sleep 30", "timeout": 1})
        assert lost.outcome is Outcome.UNCERTAIN
        refused = await rt.call(s, "write", {"path": "result.txt", "content": "x"})
        assert refused.block_kind is BlockKind.DENIED
        # The model checks for the result the lost call would have written: not there.
        looked = await rt.call(s, "read", {"path": "result.txt"})
        assert looked.outcome is Outcome.ERROR and "does not exist" in looked.output
        allowed = await rt.call(s, "write", {"path": "result.txt", "content": "x"})
        assert allowed.outcome is Outcome.OK, allowed.output
    finally:
        rt.close()


def test_doctor_names_a_postgres_store_by_its_url_without_the_password(tmp_path: Path) -> None:
    dsn = "postgresql://zuno:s3cret@db.example:5433/fleet"
    out = subprocess.run(
        [*ZUNO, "doctor", "--workspace", str(tmp_path), "--json"],
        env={**os.environ, "ZUNO_DB": dsn},
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(out.stdout)
    assert report["store"] == "postgresql://zuno@db.example:5433/fleet"
    assert "s3cret" not in out.stdout + out.stderr


def _env(db: str, model: FleetModelServer, lease: str) -> dict[str, str]:
    return {
        **os.environ,
        "ZUNO_DB": db,
        "OPENAI_BASE_URL": model.openai_base_url,
        "OPENAI_API_KEY": "sk-fleet",
        "ZUNO_LEASE_SECONDS": lease,
    }


def _submit(env: dict[str, str], ws: Path, task: int) -> str:
    proc = subprocess.run(
        [
            *ZUNO,
            "submit",
            prompt_for(task),
            "--yes",
            "--model",
            MODEL,
            "--workspace",
            str(ws),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_submitted_session_finished_by_resume_is_done(
    tmp_path: Path, fleet_model: FleetModelServer
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "marks").mkdir(parents=True)
    db = str(tmp_path / "z.db")
    env = _env(db, fleet_model, "30")
    session_id = _submit(env, workspace, 1)
    # Nobody runs the queue: a person takes the session on with resume, to its answer.
    run = subprocess.run(
        [*ZUNO, "resume", session_id, "go on", "--yes"],
        env=env,
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    store = open_store(db)
    try:
        record = store.get_session(session_id)
        assert record is not None and record.state == "done"
    finally:
        store.close()


def _rows(db: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    store = open_store(db)
    try:
        return store.query(sql, params)
    finally:
        store.close()


def test_a_killed_workers_session_is_claimed_at_once_on_the_same_machine(
    tmp_path: Path, fleet_model: FleetModelServer
) -> None:
    """Lease 60 s: the takeover comes while the dead worker's lease would still run."""
    fleet_model.delay = 30.0
    workspace = tmp_path / "ws"
    (workspace / "marks").mkdir(parents=True)
    db = str(tmp_path / "z.db")
    env = _env(db, fleet_model, "60")
    session_id = _submit(env, workspace, 1)
    logs = [(tmp_path / f"w{n}.log").open("w") for n in (1, 2)]
    victim = subprocess.Popen([*ZUNO, "worker"], env=env, stdout=logs[0], stderr=logs[0])
    other: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 120
        while not _rows(db, "SELECT 1 FROM calls WHERE status = 'started'"):
            assert time.monotonic() < deadline, (tmp_path / "w1.log").read_text()
            time.sleep(0.1)
        other = subprocess.Popen([*ZUNO, "worker"], env=env, stdout=logs[1], stderr=logs[1])
        time.sleep(1)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
        while not _rows(
            db,
            "SELECT 1 FROM events WHERE session_id = ? AND kind = 'fleet.claimed'"
            " AND data LIKE '%taken_from\": \"w1%'",
            (session_id,),
        ):
            assert time.monotonic() < deadline, (tmp_path / "w2.log").read_text()
            time.sleep(0.1)
        ((claimed_at,),) = _rows(
            db,
            "SELECT MAX(at) FROM events WHERE session_id = ? AND kind = 'fleet.claimed'",
            (session_id,),
        )
        ((beat,),) = _rows(db, "SELECT MAX(heartbeat_at) FROM workers WHERE pid = ?", (victim.pid,))
        assert claimed_at < beat + 60, "the session waited for the dead worker's lease"
    finally:
        for proc in (victim, other):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
        for log in logs:
            log.close()


_PAUSED = """
import os, sys
from pathlib import Path
import anyio
from zuno.execution.process import run_process
from zuno.durability.store import open_store
from zuno.durability.workers import WorkerLease

store = open_store(Path(sys.argv[1]))
lease = WorkerLease(store, lease_seconds=3)


async def main() -> None:
    print("ready", flush=True)
    await run_process(
        ["sh", "-c", f"echo $$ > {sys.argv[2]}.pid; sleep 5; echo ran > {sys.argv[2]}"],
        cwd=Path.cwd(),
        env=dict(os.environ),
        time_limit=None,
        on_stdout=lambda chunk: None,
        on_stderr=lambda chunk: None,
    )


anyio.run(main)
"""


def test_a_paused_worker_cannot_keep_its_command_past_its_lease(tmp_path: Path) -> None:
    """SIGSTOP the worker, not its command: the guard kills the command at the fence."""
    mark = tmp_path / "mark"
    worker = subprocess.Popen(
        [sys.executable, "-c", _PAUSED, str(tmp_path / "z.db"), str(mark)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        pid_file = Path(f"{mark}.pid")
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text().strip():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(worker.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        command = int(pid_file.read_text())
        # Past the moment the command would have written (it sleeps 5 s).
        time.sleep(max(0.0, stopped + 7 - time.monotonic()))
        assert not mark.exists(), "the paused worker's command ran past its lease"
        assert not _alive(command)
    finally:
        worker.kill()
        worker.wait(timeout=30)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
