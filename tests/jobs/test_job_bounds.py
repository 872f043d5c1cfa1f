"""Background jobs are bounded like foreground commands: output cap and a deadline.

A job that printed 20 MB went 20 MB past a 1 MiB ``artifact_max_bytes``, and a
job started without a timeout could run for ever.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from zuno.config.loading import Config
from zuno.core.declarations import Outcome
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

_MIB = 1 << 20


def _runtime(workspace: Path, db: Path, **config: object) -> Runtime:
    return Runtime(
        workspace, config=Config.model_validate(config), db_path=db, approver=ApproveAll()
    )


async def test_job_output_keeps_its_first_and_last_parts_within_the_cap(
    workspace: Path, tmp_path: Path
) -> None:
    rt = _runtime(workspace, tmp_path / "z.db", tool_output={"artifact_max_bytes": _MIB})
    # 20 MiB of numbered lines: the first and the last must survive.
    command = "python3 -c \"import sys\nfor i in range(2_000_000): print(f'line {i:09d}')\""
    async with rt:
        s = rt.open_session()
        started = await rt.call(s, "shell", {"command": command, "background": True})
        assert started.outcome is Outcome.OK, started.output
        job_id = started.data["job_id"] if started.data else ""
        waited = await rt.call(s, "bg", {"action": "wait", "job_id": job_id, "timeout": 300})
        assert "succeeded" in waited.output, waited.output
        job = rt.jobs.get(job_id)
        assert job is not None
    log = await anyio.Path(job.output_path).read_bytes()
    assert len(log) <= _MIB + 512
    assert log.startswith(b"line 000000000\n")
    assert log.endswith(b"line 001999999\n")
    assert b"dropped from the middle of this job output" in log


async def test_a_job_without_a_timeout_gets_the_default_deadline(
    workspace: Path, tmp_path: Path
) -> None:
    marker = workspace / "survived"
    rt = _runtime(workspace, tmp_path / "z.db", sandbox={"job_timeout_default": 1})
    async with rt:
        s = rt.open_session()
        started = await rt.call(
            s, "shell", {"command": "sleep 30; touch survived", "background": True}
        )
        job_id = started.data["job_id"] if started.data else ""
        waited = await rt.call(s, "bg", {"action": "wait", "job_id": job_id, "timeout": 120})
        job = rt.jobs.get(job_id)
        assert job is not None and job.state.value == "timed_out", waited.output
    assert not marker.exists()


async def test_output_of_a_running_capped_job_reads_in_order(
    workspace: Path, tmp_path: Path
) -> None:
    rt = _runtime(workspace, tmp_path / "z.db", tool_output={"artifact_max_bytes": _MIB})
    command = "python3 -c \"import sys\nfor i in range(400_000): print(f'line {i:09d}')\"; sleep 60"
    async with rt:
        s = rt.open_session()
        started = await rt.call(s, "shell", {"command": command, "background": True})
        job_id = started.data["job_id"] if started.data else ""
        seen = b""
        # Page through what the running job offers until the ordered part is exhausted.
        for _ in range(2000):
            data, _ = rt.jobs.read_output(job_id, len(seen), 256 * 1024)
            seen += data
            if len(seen) >= _MIB // 2:
                break
            await anyio.sleep(0.05)
        await rt.call(s, "bg", {"action": "cancel", "job_id": job_id})
    lines = seen.decode().splitlines()
    complete = [ln for ln in lines if len(ln) == len("line 000000000")]
    assert complete == [f"line {i:09d}" for i in range(len(complete))]
