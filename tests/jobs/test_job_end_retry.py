"""A job's end survives a connection broken under its write.

A worker's fence breaks the connection under a stuck transaction; a job ending
at that moment lost its end (no row update, no ``job.late_result``), and a
second try must not take the end it already wrote for a late one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from zuno.config.loading import Config
from zuno.core.declarations import Outcome
from zuno.durability.store.errors import StoreUnavailable
from zuno.policy.approvals import ApproveAll
from zuno.session.jobs import JobLane
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("landed", [False, True], ids=["lost-before", "answer-lost"])
async def test_a_job_end_is_written_once_across_a_broken_connection(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, landed: bool
) -> None:
    original = JobLane._write_end  # pyright: ignore[reportPrivateUsage]
    tries: list[int] = []

    def flaky(self: JobLane, *args: Any) -> None:
        tries.append(1)
        if len(tries) == 1:
            if landed:
                original(self, *args)  # written, but the answer never came back
            raise StoreUnavailable("the connection was broken under the write")
        original(self, *args)

    monkeypatch.setattr(JobLane, "_write_end", flaky)
    rt = Runtime(workspace, config=Config(), db_path=tmp_path / "z.db", approver=ApproveAll())
    async with rt:
        s = rt.open_session()
        started = await rt.call(s, "shell", {"command": "true", "background": True})
        assert started.outcome is Outcome.OK, started.output
        job_id = started.data["job_id"] if started.data else ""
        waited = await rt.call(s, "bg", {"action": "wait", "job_id": job_id, "timeout": 120})
        assert "succeeded" in waited.output, waited.output
    assert len(tries) == 2
    assert rt.store.query("SELECT state FROM jobs WHERE job_id = ?", (job_id,)) == [("succeeded",)]
    late = rt.store.query("SELECT kind FROM events WHERE kind = 'job.late_result'", ())
    assert late == [], "the worker's own end was taken for a late one"
