"""Background jobs: shell background, bg and job, lost jobs after a restart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from zuno.config.loading import Config
from zuno.core.declarations import Concurrency, Effect, Outcome
from zuno.policy.approvals import ApprovalRequest, CallbackApprover
from zuno.session.jobs import JobState
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


def make_runtime(workspace: Path, db: Path, asked: list[str] | None = None) -> Runtime:
    def approve(request: ApprovalRequest) -> bool:
        if asked is not None:
            asked.append(f"{request.tool}:{request.arguments.get('action', '')}")
        return True

    return Runtime(workspace, config=Config(), db_path=db, approver=CallbackApprover(approve))


async def test_background_shell_job_lifecycle(workspace: Path, tmp_path: Path) -> None:
    asked: list[str] = []
    rt = make_runtime(workspace, tmp_path / "z.db", asked)
    async with rt:
        s = rt.open_session()
        started = await rt.call(
            s, "shell", {"command": "echo first; sleep 0.3; echo second", "background": True}
        )
        assert started.outcome is Outcome.OK
        assert started.declaration is not None
        assert started.declaration.concurrency is Concurrency.ISOLATED_BACKGROUND
        job_id = started.data["job_id"] if started.data else ""
        listed = await rt.call(s, "bg", {"action": "list"})
        assert job_id in listed.output
        waited = await rt.call(s, "bg", {"action": "wait", "job_id": job_id, "timeout": 60})
        assert "succeeded" in waited.output and "exit code 0" in waited.output
        output = await rt.call(s, "bg", {"action": "output", "job_id": job_id})
        assert output.output.startswith("first\nsecond\n")
        assert output.data is not None and output.data["next_offset"] == len(b"first\nsecond\n")
        state = await rt.call(s, "job", {"job_id": job_id})
        assert state.data is not None and state.data["state"] == "succeeded"
        assert state.data["exit_code"] == 0 and state.data["output_bytes"] == 13
    # Only the shell start and nothing else needed approval: bg list/wait/output and job read.
    assert asked == ["shell:"]


async def test_bg_cancel_is_side_effecting_and_kills_the_job(
    workspace: Path, tmp_path: Path
) -> None:
    asked: list[str] = []
    rt = make_runtime(workspace, tmp_path / "z.db", asked)
    async with rt:
        s = rt.open_session()
        started = await rt.call(s, "shell", {"command": "sleep 100", "background": True})
        job_id = started.data["job_id"] if started.data else ""
        cancelled = await rt.call(s, "bg", {"action": "cancel", "job_id": job_id})
        assert cancelled.declaration is not None
        assert cancelled.declaration.effect is Effect.SIDE_EFFECTING
        assert "cancelled" in cancelled.output
        job = rt.jobs.get(job_id)
        assert job is not None and job.state is JobState.CANCELLED
    assert asked == ["shell:", "bg:cancel"]


async def test_bg_requires_a_job_id_for_output(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path / "z.db")
    s = rt.open_session()
    result = await rt.call(s, "bg", {"action": "output"})
    assert result.outcome is Outcome.BLOCKED and "`job_id` is required" in result.output


async def test_background_needs_a_running_runtime(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path / "z.db")
    s = rt.open_session()
    result = await rt.call(s, "shell", {"command": "true", "background": True})
    assert result.outcome is Outcome.ERROR and "async with runtime" in result.output


def test_a_job_whose_process_died_is_lost(workspace: Path, tmp_path: Path) -> None:
    db = tmp_path / "z.db"
    script = f"""
import anyio, os, sys
from pathlib import Path
from zuno.config.loading import Config
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

async def main():
    rt = Runtime(Path({str(workspace)!r}), config=Config(), db_path=Path({str(db)!r}),
                 approver=ApproveAll())
    async with rt:
        s = rt.open_session()
        r = await rt.call(s, "shell", {{"command": "sleep 100", "background": True}})
        print(r.data["job_id"], flush=True)
        rt.store.flush()
        os._exit(9)  # the owner dies without seeing its job end

anyio.run(main)
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    job_id = proc.stdout.strip()
    assert job_id.startswith("job_"), proc.stderr
    rt = make_runtime(workspace, db)
    job = rt.jobs.get(job_id)
    assert job is not None and job.state is JobState.LOST
    assert "unknown" in (job.detail or "")


async def test_cli_call_waits_for_its_background_job(workspace: Path, tmp_path: Path) -> None:
    env = {"ZUNO_DB": str(tmp_path / "cli.db"), "PATH": "/usr/bin:/bin"}
    args = json.dumps({"command": "sleep 0.2; echo done > marker.txt", "background": True})

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "zuno", "call", "shell", args, "--yes", "--json"],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    proc = await anyio.to_thread.run_sync(run)
    body: dict[str, Any] = json.loads(proc.stdout)
    assert body["outcome"] == "ok" and body["concurrency"] == "isolated_background"
    assert (workspace / "marker.txt").read_text() == "done\n"


async def test_a_background_command_runs_sandboxed_in_its_workdir(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "sub").mkdir()
    outside = tmp_path / "outside.txt"
    rt = make_runtime(workspace, tmp_path / "z.db")
    async with rt:
        s = rt.open_session()
        started = await rt.call(
            s,
            "shell",
            {
                "command": f"pwd > where.txt; echo escape > {outside}",
                "background": True,
                "workdir": "sub",
            },
        )
        job_id = started.data["job_id"] if started.data else ""
        await rt.call(s, "bg", {"action": "wait", "job_id": job_id, "timeout": 60})
    assert (workspace / "sub" / "where.txt").read_text().strip().endswith("/sub")
    assert not outside.exists()  # the sandbox applies to background jobs too
    job = rt.jobs.get(job_id)
    assert job is not None and job.state is JobState.FAILED
