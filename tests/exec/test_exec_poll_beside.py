"""exec_poll is ReadOnly / Safe / ParallelSafe: it runs beside other calls of its step.

Judged from the events the dispatcher recorded (when each call started and
finished), not from how long anything took.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from exec_harness import exec_runtime, gone, new_marker, sleeper

from zuno.core.declarations import Concurrency, Outcome
from zuno.dispatch.dispatcher import CallRequest

pytestmark = pytest.mark.anyio


async def test_a_poll_runs_beside_a_read(workspace: Path, tmp_path: Path) -> None:
    marker = new_marker()
    (workspace / "notes.txt").write_text("beside\n")
    async with exec_runtime(workspace, tmp_path / "z.db") as rt:
        s = rt.open_session()
        # Silent and not reading its input: the poll waits out its yield_ms.
        await rt.call(s, "exec_command", {"command": sleeper(marker), "yield_ms": 0})
        poll, read = await rt.dispatch(
            s,
            [
                CallRequest("exec_poll", {"session": 1, "yield_ms": 3000}),
                CallRequest("read", {"path": "notes.txt"}),
            ],
        )
        assert poll.outcome is Outcome.OK and read.outcome is Outcome.OK
        assert poll.output.startswith("[process 1 is still running")
        assert "beside" in read.output
        assert poll.declaration is not None
        assert poll.declaration.concurrency is Concurrency.PARALLEL_SAFE
        rows = rt.store.query(
            "SELECT call_id, kind, at FROM events WHERE session_id = ?"
            " AND kind IN ('call.started', 'call.finished')",
            (s.session_id,),
        )
        await rt.call(s, "exec_kill", {"session": 1})
    at = {(str(call), str(kind)): float(t) for call, kind, t in rows}
    poll_span = (at[(poll.call_id, "call.started")], at[(poll.call_id, "call.finished")])
    read_span = (at[(read.call_id, "call.started")], at[(read.call_id, "call.finished")])
    # Overlapping spans: each started before the other finished.
    assert read_span[0] < poll_span[1] and poll_span[0] < read_span[1], json.dumps(at)
    assert gone(marker)
