"""Undo is the way back after a failed change, so the inspection rule does not stand in its way.

After a side-effecting call fails, further changes wait for an inspection of
the real state. An undo checks the real state of every file it restores
against the checkpoints before it writes (a file changed since is refused), so
making the user (or the model) look first would only delay the repair.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_undo_api import make_runtime

pytestmark = pytest.mark.anyio


async def test_undo_runs_after_a_failed_change_without_an_inspection(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "a.txt").write_text("hello\n")
    async with make_runtime(workspace, tmp_path / "z.db") as rt:
        s = rt.open_session()
        shell = await rt.call(s, "shell", {"command": "echo changed > a.txt; touch new.txt"})
        assert shell.outcome.value == "ok", shell.output
        failed = await rt.call(s, "shell", {"command": "exit 3"})
        assert failed.outcome.value in ("ok", "error")
        refused = await rt.call(s, "write", {"path": "a.txt", "content": "x\n"})
        assert refused.outcome.value == "error", refused.output  # never read: not written
        blocked = await rt.call(s, "write", {"path": "b.txt", "content": "b\n"})
        assert blocked.block_kind is not None and blocked.block_kind.value == "denied"
        undone = await rt.call(s, "undo", {"call": shell.call_id})
        assert undone.outcome.value == "ok", undone.output
    assert (workspace / "a.txt").read_text() == "hello\n"
    assert not (workspace / "new.txt").exists()
    assert not (workspace / "b.txt").exists()
