"""A step of many calls: the bound on parallel calls, and when their rows are committed.

ParallelSafe calls of one group run on at most ``concurrency.tool_calls``
runners, in model order; a step's read-only results are committed together at
the step's close, before the dispatch returns them, and before any later
side-effecting call of the step begins its effect.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from probe_tools import Recorder, probe_tools
from zuno.config.loading import Config
from zuno.dispatch.dispatcher import CallRequest
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


def make_runtime(workspace: Path, tmp_path: Path, recorder: Recorder, **config: Any) -> Runtime:
    return Runtime(
        workspace,
        config=Config.model_validate(config),
        db_path=tmp_path / "zuno.db",
        approver=ApproveAll(),
        tools=probe_tools(recorder),
    )


def committed(db: Path) -> dict[str, tuple[str, str | None]]:
    """(status, result) of every call row another connection can read now, by call id."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT call_id, status, result FROM calls").fetchall()
    return {str(cid): (str(status), result) for cid, status, result in rows}


def most_at_once(recorder: Recorder) -> int:
    running = peak = 0
    for what, _tag, _tick in recorder.events:
        running += 1 if what == "start" else -1
        peak = max(peak, running)
    return peak


async def test_many_parallel_calls_run_under_the_bound_and_all_land(
    workspace: Path, tmp_path: Path
) -> None:
    rec = Recorder()
    rt = make_runtime(workspace, tmp_path, rec, concurrency={"tool_calls": 3})
    session = rt.open_session()
    requests = [CallRequest("probe", {"tag": f"p{i}", "delay": 0.002}) for i in range(60)]
    results = await rt.dispatch(session, requests)
    assert [r.output for r in results] == [f"done p{i}" for i in range(60)]
    assert most_at_once(rec) == 3  # they overlap, never more than the bound
    starts = [tag for what, tag, _ in rec.events if what == "start"]
    assert starts == [f"p{i}" for i in range(60)]  # taken in model order
    # Every row and result is committed by the time the step's results are handed back.
    rows = committed(tmp_path / "zuno.db")
    assert [rows[r.call_id] for r in results] == [("finished", f"done p{i}") for i in range(60)]
    rt.close()


async def test_read_only_results_are_committed_before_a_later_effect_begins(
    workspace: Path, tmp_path: Path
) -> None:
    rec = Recorder()
    rt = make_runtime(workspace, tmp_path, rec)
    session = rt.open_session()
    seen: dict[str, tuple[str, str | None]] = {}
    original = rec.mark

    def mark(what: str, tag: str) -> None:
        if what == "start" and tag == "effect":
            seen.update(committed(tmp_path / "zuno.db"))
        original(what, tag)

    rec.mark = mark  # type: ignore[method-assign]
    requests = [CallRequest("probe", {"tag": f"r{i}"}) for i in range(5)]
    requests.append(
        CallRequest("probe", {"tag": "effect", "effect": "side_effecting", "mode": "exclusive"})
    )
    results = await rt.dispatch(session, requests)
    assert [r.output for r in results] == [*(f"done r{i}" for i in range(5)), "done effect"]
    # When the side-effecting call began, the read-only results before it were
    # committed, and its own started row too (intent before effect).
    assert [seen[r.call_id] for r in results[:5]] == [("finished", f"done r{i}") for i in range(5)]
    assert seen[results[5].call_id] == ("started", None)
    rt.close()
