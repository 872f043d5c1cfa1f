"""Which calls take a checkpoint: those that can change workspace files, and only those.

A plan, todo or goal update is side-effecting (it changes the session's stored
work state) but cannot touch a file: a snapshot of the workspace before it is
pure cost on a hot path, and an undo of it would restore nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_undo_api import make_runtime, row_of

pytestmark = pytest.mark.anyio


async def test_only_calls_that_can_change_files_take_a_checkpoint(
    workspace: Path, tmp_path: Path
) -> None:
    async with make_runtime(workspace, tmp_path / "z.db") as rt:
        s = rt.open_session()
        plan = await rt.call(s, "plan_update", {"plan": "1. look"})
        todo = await rt.call(
            s, "todo_update", {"todos": [{"content": "look", "status": "pending"}]}
        )
        write = await rt.call(s, "write", {"path": "a.txt", "content": "a\n"})
        shell = await rt.call(s, "shell", {"command": "echo b > b.txt"})
        read = await rt.call(s, "read", {"path": "a.txt"})
        for result in (plan, todo, write, shell, read):
            assert result.outcome.value == "ok", result.output
        assert row_of(rt, s, plan.call_id).snapshot is None
        assert row_of(rt, s, todo.call_id).snapshot is None
        assert row_of(rt, s, read.call_id).snapshot is None
        assert row_of(rt, s, write.call_id).snapshot is not None
        assert row_of(rt, s, shell.call_id).snapshot is not None
