"""Which calls take a checkpoint: those that can change workspace files, and only those.

A plan, todo or goal update is side-effecting (it changes the session's stored
work state) but cannot touch a file: a snapshot of the workspace before it is
pure cost on a hot path, and an undo of it would restore nothing.
"""

from __future__ import annotations

import contextlib
import os
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
    rt.close()  # its watch, else left to the garbage collector (the count below)


def _inotify_fds() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
    return count


async def test_closing_the_runtime_stops_watching_the_workspace(
    workspace: Path, tmp_path: Path
) -> None:
    before = _inotify_fds()
    rt = make_runtime(workspace, tmp_path / "z.db")
    async with rt:
        s = rt.open_session()
        for name in ("a.txt", "b.txt"):
            result = await rt.call(s, "write", {"path": name, "content": "x\n"})
            assert result.outcome.value == "ok", result.output
        assert _inotify_fds() == before + 1  # the watch of later snapshots
    rt.close()
    assert _inotify_fds() == before
