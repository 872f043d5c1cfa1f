"""Round trips of one call through ``Runtime.call`` on PostgreSQL, counted by libpq's own trace.

A round trip is a wait for the server: the client sent messages (``F`` lines
of the trace) and then reads the server's answers (``B`` lines). The count is
the number of F-to-B turns; the server's ReadyForQuery answers (one per Sync)
are counted beside it. Nothing in Zuno's code counts anything here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pg_test_tools import Append, Echo
from psycopg import pq

from zuno.config.loading import Config
from zuno.core.declarations import Outcome
from zuno.durability.store.postgres import PostgresStore
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


@contextmanager
def libpq_trace(store: PostgresStore, path: Path) -> Iterator[list[list[str]]]:
    """libpq's trace of the store's connection while the block runs, as split lines."""
    messages: list[list[str]] = []
    conn = store.connection
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    conn.pgconn.trace(fd)
    conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
    try:
        yield messages
    finally:
        conn.pgconn.untrace()
        os.close(fd)
        # The connection must be the same one: a reconnect would hide round trips.
        assert store.connection is conn
        messages.extend(line.split("\t") for line in path.read_text().splitlines() if line)


def round_trips(messages: list[list[str]]) -> tuple[int, int]:
    """(turns from client to server and back, ReadyForQuery answers) in a trace."""
    turns = ready = 0
    previous = ""
    for fields in messages:
        direction, kind = fields[0], fields[2]
        if direction == "B" and previous == "F":
            turns += 1
        if direction == "B" and kind == "ReadyForQuery":
            ready += 1
        previous = direction
    return turns, ready


def make_runtime(workspace: Path, dsn: str, *, inspection: bool = True) -> Runtime:
    # `append` is allowed by a rule: no approver is asked (as on a fleet worker).
    config = Config.model_validate(
        {
            "permission": {"rules": [{"tool": "append", "action": "allow"}]},
            "replay": {"require_inspection": inspection},
        }
    )
    return Runtime(
        workspace,
        config=config,
        db_path=Path(dsn),
        approver=ApproveAll(),
        tools=[Echo(), Append()],
    )


async def test_a_read_only_call_takes_at_most_two_round_trips(
    workspace: Path, pg_dsn: str, tmp_path: Path
) -> None:
    rt = make_runtime(workspace, pg_dsn)
    assert isinstance(rt.store, PostgresStore)
    session = rt.open_session()
    for i in range(6):  # psycopg prepares statements it has run a few times
        await rt.call(session, "echo", {"text": f"warm {i}"})
    with libpq_trace(rt.store, tmp_path / "trace") as messages:
        result = await rt.call(session, "echo", {"text": "measured"})
    assert result.outcome is Outcome.OK and result.output == "measured"
    turns, ready = round_trips(messages)
    assert any(f[2] == "Bind" for f in messages if f[0] == "F"), "the trace saw no statement"
    assert 1 <= turns <= 2, messages
    assert ready <= 2
    # Everything the call wrote is in the store (read on another connection).
    check = PostgresStore(pg_dsn)
    rows = [c for c in check.calls(session.session_id) if c.call_id == result.call_id]
    assert [(r.status, r.outcome, r.result) for r in rows] == [("finished", "ok", "measured")]
    kinds = [e.kind for e in check.events(session.session_id) if e.call_id == result.call_id]
    assert kinds.count("call.started") == 1 and kinds.count("call.finished") == 1
    check.close()
    rt.close()


@pytest.mark.parametrize("inspection", [False, True])
async def test_a_side_effecting_call_takes_at_most_three_round_trips(
    workspace: Path, pg_dsn: str, tmp_path: Path, inspection: bool
) -> None:
    """Three: the step, the started row, the result (each one pipelined transaction).

    With the inspection rule on, the rule's read (zuno.durability.recovery) rides with the
    step's opening: still three.
    """
    rt = make_runtime(workspace, pg_dsn, inspection=inspection)
    assert isinstance(rt.store, PostgresStore)
    session = rt.open_session()
    for i in range(6):
        await rt.call(session, "append", {"text": f"warm {i}"})
    with libpq_trace(rt.store, tmp_path / "trace") as messages:
        result = await rt.call(session, "append", {"text": "measured"})
    assert result.outcome is Outcome.OK
    assert (workspace / "effects.txt").read_text().splitlines()[-1] == "measured"
    turns, ready = round_trips(messages)
    assert 2 <= turns <= 3, messages
    assert ready <= 3
    check = PostgresStore(pg_dsn)
    rows = [c for c in check.calls(session.session_id) if c.call_id == result.call_id]
    assert [(r.status, r.outcome) for r in rows] == [("finished", "ok")]
    check.close()
    rt.close()
