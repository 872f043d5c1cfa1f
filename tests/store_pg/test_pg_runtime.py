"""A whole runtime on PostgreSQL: dispatch, recovery, jobs, work state and memory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from zuno.config.loading import Config
from zuno.core.declarations import Outcome
from zuno.dispatch.dispatcher import CallRequest
from zuno.durability.memory import decide_memory, list_memories, propose_memory
from zuno.durability.recovery import issue_notice, pending_notice
from zuno.durability.store.postgres import PostgresStore
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

sys.path.insert(0, str(Path(__file__).parents[1] / "core"))
from probe_tools import Recorder, probe_tools

pytestmark = pytest.mark.anyio


def make_runtime(workspace: Path, dsn: str, tools: Any = None) -> Runtime:
    return Runtime(
        workspace, config=Config(), db_path=Path(dsn), approver=ApproveAll(), tools=tools
    )


def probe(tag: str, **kw: Any) -> CallRequest:
    return CallRequest("probe", {"tag": tag, **kw})


async def test_dispatch_keeps_model_order_and_records_everything(
    workspace: Path, pg_dsn: str
) -> None:
    rt = make_runtime(workspace, pg_dsn, probe_tools(Recorder()))
    assert isinstance(rt.store, PostgresStore)
    s = rt.open_session()
    results = await rt.dispatch(
        s,
        [
            probe("a", delay=0.2),
            probe("b", delay=0.05),
            probe("x", mode="exclusive", effect="side_effecting"),
            probe("f", fail="error"),
        ],
    )
    assert [r.output for r in results[:3]] == ["done a", "done b", "done x"]
    assert results[3].outcome is Outcome.ERROR
    kinds = [e.call_id for e in rt.store.events(s.session_id) if e.kind == "call.result"]
    assert kinds == [r.call_id for r in results]
    rows = rt.store.calls(s.session_id)
    assert [r.call_id for r in rows] == [r.call_id for r in results]
    assert all(r.status == "finished" for r in rows)
    assert rt.store.unfinished_calls(s.session_id) == []
    rt.close()


async def test_work_state_and_memory_through_the_dispatcher(workspace: Path, pg_dsn: str) -> None:
    rt = make_runtime(workspace, pg_dsn)
    s = rt.open_session()
    await rt.call(s, "plan_update", {"plan": "first"})
    await rt.call(s, "plan_update", {"plan": "second"})
    got = await rt.call(s, "plan_get", {})
    assert got.data == {"plan": "second", "revision": 2}
    todos = await rt.call(s, "todo_update", {"todos": [{"content": "a"}, {"content": "b"}]})
    assert todos.outcome is Outcome.OK
    changed = await rt.call(s, "todo_update", {"changes": [{"id": "2", "status": "completed"}]})
    assert changed.outcome is Outcome.OK, changed.output
    await rt.call(s, "goal_update", {"objective": "ship"})
    await rt.call(s, "goal_update", {"status": "achieved"})
    goal = await rt.call(s, "goal_get", {})
    assert "ship" in goal.output and "achieved" in goal.output
    memory, new = propose_memory(rt.store, "use tabs", "workspace", workspace, s.session_id)
    assert new and memory.memory_id == 1
    again, new = propose_memory(rt.store, "use tabs", "workspace", workspace, s.session_id)
    assert not new and again.memory_id == 1
    decided, before = decide_memory(rt.store, 1, "accepted")
    assert (decided.status, before) == ("accepted", "proposed")
    assert [m.text for m in list_memories(rt.store, status="accepted")] == ["use tabs"]
    rt.close()


async def test_background_job_lifecycle(workspace: Path, pg_dsn: str) -> None:
    rt = make_runtime(workspace, pg_dsn)
    async with rt:
        s = rt.open_session()
        started = await rt.call(s, "shell", {"command": "echo hi", "background": True})
        assert started.outcome is Outcome.OK and started.data is not None
        job_id = started.data["job_id"]
        waited = await rt.call(s, "bg", {"action": "wait", "job_id": job_id, "timeout": 60})
        assert "succeeded" in waited.output
        state = await rt.call(s, "job", {"job_id": job_id})
        assert state.data is not None and state.data["exit_code"] == 0


def test_a_call_left_started_by_a_dead_process_becomes_uncertain(
    workspace: Path, pg_dsn: str
) -> None:
    script = f"""
import anyio, os
from pathlib import Path
from zuno.config.loading import Config
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

async def main():
    rt = Runtime(Path({str(workspace)!r}), config=Config(), approver=ApproveAll())
    s = rt.open_session()
    print(s.session_id, flush=True)
    effects = Path({str(workspace)!r}) / "effects.txt"
    async with anyio.create_task_group() as tg:
        tg.start_soon(rt.call, s, "shell", {{"command": "echo once >> effects.txt; sleep 30"}})
        while not effects.exists():
            await anyio.sleep(0.01)
        os.kill(os.getpid(), 9)

anyio.run(main)
"""
    # The child finds PostgreSQL through ZUNO_DB.
    env = {**os.environ, "ZUNO_DB": pg_dsn}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    session_id = proc.stdout.strip().splitlines()[0]
    rt = make_runtime(workspace, pg_dsn)
    assert [c.status for c in rt.store.calls(session_id)] == ["started"], proc.stderr
    s = rt.open_session(session_id)
    (row,) = rt.store.calls(s.session_id)
    assert (row.status, row.outcome) == ("finished", "uncertain")
    notice = pending_notice(rt.store, s.session_id)
    assert notice is not None and notice.attempt == 1 and notice.items[0].call_id == row.call_id
    issue_notice(rt.store, notice)
    assert pending_notice(rt.store, s.session_id) is None
    kinds = [e.kind for e in rt.store.events(s.session_id)]
    assert "call.interrupted" in kinds
    assert (workspace / "effects.txt").read_text() == "once\n"
    rt.close()
