"""What outlives an interactive process: its row, its number, and the word "gone".

A process lives only as long as the runtime that started it. After a restart, or
when the Zuno process running it died, its number is reported gone, never
reattached, and numbers are never reused in a session. Also: the exec tools are
opt-in, with the declarations the issue fixes, and a session has a cap on live
processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from exec_harness import (
    EXEC_TOOLS,
    appeared,
    exec_config,
    exec_runtime,
    gone,
    new_marker,
    sleeper,
    with_marker,
)

from zuno.config.loading import Config
from zuno.core.declarations import BlockKind, Concurrency, Effect, Outcome, Replay
from zuno.core.tool_names import DEFAULT_SURFACE
from zuno.execution.process_table import MAX_LIVE
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


async def test_after_a_restart_a_process_is_gone_and_its_number_not_reused(
    workspace: Path, tmp_path: Path
) -> None:
    marker = new_marker()
    db = tmp_path / "z.db"
    async with exec_runtime(workspace, db) as first:
        s = first.open_session()
        started = await first.call(s, "exec_command", {"command": sleeper(marker), "yield_ms": 0})
        assert started.output.startswith("[process 1 is still running")
        session_id = s.session_id
    first.close()
    assert gone(marker)

    async with exec_runtime(workspace, db) as second:
        s = second.open_session(session_id)
        typed = await second.call(s, "exec_poll", {"session": 1})
        assert typed.outcome is Outcome.ERROR
        assert "process 1 has ended (killed when the runtime ended)" in typed.output
        missing = await second.call(s, "exec_poll", {"session": 7})
        assert "there is no process 7 in this session" in missing.output
        again = await second.call(s, "exec_command", {"command": "echo fresh", "yield_ms": 30_000})
        assert again.output == "[process 2 exited with code 0]\nfresh"
    second.close()


ZUNO = [sys.executable, "-m", "zuno"]


@pytest.mark.parametrize("kind", ["bubblewrap", "landlock"])
async def test_a_dead_zuno_leaves_its_process_lost_never_reattached(
    kind: str, workspace: Path, tmp_path: Path
) -> None:
    """The Zuno process is killed with SIGKILL: no cleanup of its own runs."""
    marker = new_marker()
    db = tmp_path / "cli.db"
    config = Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"
    config.write_text(json.dumps(exec_config(kind, permission={"mode": "permissive"})))
    batch = tmp_path / "batch.json"
    batch.write_text(
        json.dumps(
            [
                # nohup: the hangup of its terminal alone would not end it.
                {
                    "tool": "exec_command",
                    "args": {"command": f"nohup {sleeper(marker)}", "yield_ms": 0},
                },
                {"tool": "exec_poll", "args": {"session": 1, "yield_ms": 30_000}},
            ]
        )
    )
    _start_then_kill_zuno(batch, workspace, db, marker)
    # The sandbox dies with the Zuno process that started it, and everything in it.
    assert gone(marker)

    rt = Runtime(workspace, config=Config.model_validate(exec_config()), db_path=db)
    row = rt.store.query("SELECT session_id, state FROM exec_processes")
    assert len(row) == 1 and row[0][1] == "running"
    async with rt:
        s = rt.open_session(str(row[0][0]))
        polled = await rt.call(s, "exec_poll", {"session": 1})
        assert polled.outcome is Outcome.ERROR
        assert "process 1 is gone" in polled.output and "never reattached" in polled.output
        assert rt.store.query("SELECT state FROM exec_processes") == [("lost",)]
    rt.close()


def _start_then_kill_zuno(batch: Path, workspace: Path, db: Path, marker: str) -> None:
    """Run the batch in a zuno process and SIGKILL it once the sleeper runs."""
    zuno = subprocess.Popen(
        [*ZUNO, "batch", str(batch), "--new-session", "--json"],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(db)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert appeared(marker)
    finally:
        zuno.send_signal(signal.SIGKILL)
        zuno.wait(timeout=60)


async def test_a_session_has_at_most_max_live_processes(workspace: Path, tmp_path: Path) -> None:
    marker = new_marker()
    async with exec_runtime(workspace, tmp_path / "z.db") as rt:
        s = rt.open_session()
        for n in range(1, MAX_LIVE + 1):
            started = await rt.call(s, "exec_command", {"command": sleeper(marker), "yield_ms": 0})
            assert started.output.startswith(f"[process {n} is still running"), started.output
        refused = await rt.call(s, "exec_command", {"command": "echo no", "yield_ms": 0})
        assert refused.outcome is Outcome.BLOCKED
        assert refused.block_kind is BlockKind.INVALID_ARGUMENTS
        assert f"already has {MAX_LIVE} interactive processes running" in refused.output
        assert _count_reaches(marker, MAX_LIVE)
        await rt.call(s, "exec_kill", {"session": 3})
        allowed = await rt.call(s, "exec_command", {"command": "echo yes", "yield_ms": 30_000})
        assert allowed.output == f"[process {MAX_LIVE + 1} exited with code 0]\nyes"
    assert gone(marker)


def _count_reaches(marker: str, count: int) -> bool:
    """Whether count sleepers with marker run at once, within a bounded wait."""
    for _ in range(600):
        if len(with_marker(marker, first=True)) == count:
            return True
        time.sleep(0.05)
    return False


async def test_the_exec_tools_are_opt_in_with_their_declarations(
    workspace: Path, tmp_path: Path
) -> None:
    plain = Runtime(workspace, config=Config(), db_path=tmp_path / "a.db")
    names = plain.surface().names
    assert "shell" in DEFAULT_SURFACE and "shell" in names
    assert not set(EXEC_TOOLS) & set(names)
    blocked = await plain.call(plain.open_session(), "exec_command", {"command": "true"})
    assert blocked.outcome is Outcome.BLOCKED
    plain.close()

    listed = Runtime(
        workspace,
        config=Config.model_validate({"agents": {"repl": {"tools": ["read", "exec_poll"]}}}),
        db_path=tmp_path / "b.db",
    )
    assert listed.surface("repl").names == ["read", "exec_poll"]
    listed.close()

    on = exec_runtime(workspace, tmp_path / "c.db")
    declared = {name: on.surface().get(name) for name in EXEC_TOOLS}
    on.close()
    shapes = {
        name: (t.declaration.effect, t.declaration.replay, t.declaration.concurrency)
        for name, t in declared.items()
        if t is not None
    }
    side = (Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.EXCLUSIVE)
    assert shapes == {
        "exec_command": side,
        "write_stdin": side,
        "exec_poll": (Effect.READ_ONLY, Replay.SAFE, Concurrency.PARALLEL_SAFE),
        "exec_kill": side,
    }


async def test_processes_need_a_running_runtime(workspace: Path, tmp_path: Path) -> None:
    rt = exec_runtime(workspace, tmp_path / "z.db")
    s = rt.open_session()
    result = await rt.call(s, "exec_command", {"command": "echo hi"})
    assert result.outcome is Outcome.ERROR
    assert "need a running runtime" in result.output
    rt.close()
