"""A step of many read-only calls costs the round trips of one call, on PostgreSQL.

Each read-only call used to commit its own result (a round trip each); their
results now wait for the step's close and go in one pipelined transaction,
before the dispatch hands them on. Counted from libpq's own trace, as in
``test_pg_round_trips.py``; what was written is read back on another connection.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pg_test_tools import Echo
from test_pg_round_trips import libpq_trace, round_trips

from zuno.config.loading import Config
from zuno.core.declarations import Outcome
from zuno.dispatch.dispatcher import CallRequest
from zuno.durability.store.postgres import PostgresStore
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


async def test_a_step_of_twenty_read_only_calls_takes_two_round_trips(
    workspace: Path, pg_dsn: str, tmp_path: Path
) -> None:
    rt = Runtime(
        workspace, config=Config(), db_path=Path(pg_dsn), approver=ApproveAll(), tools=[Echo()]
    )
    assert isinstance(rt.store, PostgresStore)
    session = rt.open_session()
    requests = [CallRequest("echo", {"text": f"r{i}"}, f"m{i}") for i in range(20)]
    for _ in range(4):  # psycopg prepares statements it has run a few times
        await rt.dispatch(session, requests[:3])
    with libpq_trace(rt.store, tmp_path / "trace") as messages:
        results = await rt.dispatch(session, requests)
    assert [r.output for r in results] == [f"r{i}" for i in range(20)]
    turns, _ready = round_trips(messages)
    # The step's opening, then every row, result and the step's close together.
    assert 1 <= turns <= 2, messages
    # All of it is committed when the dispatch returns (read on another connection).
    check = PostgresStore(pg_dsn)
    try:
        rows = {c.call_id: c for c in check.calls(session.session_id)}
        assert all(rows[r.call_id].status == "finished" for r in results)
        assert [rows[r.call_id].result for r in results] == [f"r{i}" for i in range(20)]
        assert {rows[r.call_id].outcome for r in results} == {Outcome.OK.value}
        kinds = [e.kind for e in check.events(session.session_id)]
        assert kinds[-1] == "dispatch.finished"
        assert kinds.count("call.result") == 12 + 20
    finally:
        check.close()
        rt.close()
