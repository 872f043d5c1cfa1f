"""At-most-once: uncertain outcomes, inspection before mutation, recovery notices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from zuno.config.loading import Config
from zuno.core.declarations import BlockKind, Outcome
from zuno.dispatch.dispatcher import CallRequest
from zuno.durability.recovery import issue_notice, pending_notice
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


def make_runtime(workspace: Path, db: Path, **config: Any) -> Runtime:
    return Runtime(
        workspace, config=Config.model_validate(config), db_path=db, approver=ApproveAll()
    )


async def test_timed_out_command_is_uncertain_never_rerun_and_gates_writes(
    workspace: Path, tmp_path: Path
) -> None:
    db = tmp_path / "z.db"
    rt = make_runtime(workspace, db)
    s = rt.open_session()
    timed_out = await rt.call(
        s, "shell", {"command": "echo printed; echo ran >> effects.txt; sleep 30", "timeout": 1}
    )
    assert timed_out.outcome is Outcome.UNCERTAIN
    assert "will not be run again" in timed_out.output
    (row,) = rt.store.calls(s.session_id)
    assert row.outcome == "uncertain"

    # A write is refused until a read-only call has run.
    refused = await rt.call(s, "write", {"path": "x.txt", "content": "x"})
    assert refused.outcome is Outcome.BLOCKED and refused.block_kind is BlockKind.DENIED
    assert timed_out.call_id in refused.output and "read-only" in refused.output
    assert not (workspace / "x.txt").exists()

    # Resume in a new process: the notice names the call, nothing re-runs it.
    rt.close()
    rt2 = make_runtime(workspace, db)
    resumed = rt2.open_session(s.session_id)
    notice = pending_notice(rt2.store, resumed.session_id)
    assert notice is not None and notice.attempt == 1
    (item,) = notice.items
    assert item.call_id == timed_out.call_id and item.tool == "shell"
    assert "effects.txt" in item.arguments and item.outcome == "uncertain"
    # Why, from the stored reason (not the command's output, whatever it printed).
    assert item.reason.startswith("timed out after 1 s"), item.reason
    assert "recovery attempt 1" in notice.text
    issue_notice(rt2.store, notice)
    assert pending_notice(rt2.store, resumed.session_id) is None
    assert (workspace / "effects.txt").read_text() == "ran\n"

    still_refused = await rt2.call(resumed, "write", {"path": "x.txt", "content": "x"})
    assert still_refused.block_kind is BlockKind.DENIED
    inspected = await rt2.call(resumed, "read", {"path": "effects.txt"})
    assert inspected.outcome is Outcome.OK
    allowed = await rt2.call(resumed, "write", {"path": "x.txt", "content": "x"})
    assert allowed.outcome is Outcome.OK
    # The timed-out command ran exactly once.
    assert (workspace / "effects.txt").read_text() == "ran\n"


async def test_a_failure_inside_a_step_gates_the_later_side_effects(
    workspace: Path, tmp_path: Path
) -> None:
    rt = make_runtime(workspace, tmp_path / "z.db")
    s = rt.open_session()
    failed, write = await rt.dispatch(
        s,
        [
            # Timed out: a non-zero exit would be a completed call (issue 9), not a failure.
            CallRequest("shell", {"command": "sleep 30", "timeout": 1}),
            CallRequest("write", {"path": "after.txt", "content": "x"}),
        ],
    )
    assert failed.outcome is Outcome.UNCERTAIN
    assert write.outcome is Outcome.BLOCKED and write.block_kind is BlockKind.DENIED
    assert not (workspace / "after.txt").exists()
    kinds = [e.kind for e in rt.store.events(s.session_id) if e.call_id == write.call_id]
    assert kinds.index("dispatch.blocked") < kinds.index("call.result")


async def test_inspection_rule_can_be_switched_off(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path / "z.db", replay={"require_inspection": False})
    s = rt.open_session()
    failed = await rt.call(s, "shell", {"command": "sleep 30", "timeout": 1})
    assert failed.outcome is Outcome.UNCERTAIN
    assert (await rt.call(s, "write", {"path": "a", "content": "x"})).outcome is Outcome.OK


def test_a_call_left_started_by_a_dead_process_becomes_uncertain(
    workspace: Path, tmp_path: Path
) -> None:
    db = tmp_path / "z.db"
    script = f"""
import anyio, os
from pathlib import Path
from zuno.config.loading import Config
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

async def main():
    rt = Runtime(Path({str(workspace)!r}), config=Config(), db_path=Path({str(db)!r}),
                 approver=ApproveAll())
    s = rt.open_session()
    print(s.session_id, flush=True)
    effects = Path({str(workspace)!r}) / "effects.txt"
    # Dies in the middle of the command: the started row has no result.
    async with anyio.create_task_group() as tg:
        tg.start_soon(rt.call, s, "shell", {{"command": "echo once >> effects.txt; sleep 30"}})
        while not effects.exists():
            await anyio.sleep(0.01)
        os.kill(os.getpid(), 9)

anyio.run(main)
"""
    env = {**os.environ}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    session_id = proc.stdout.strip().splitlines()[0]
    rt = make_runtime(workspace, db)
    before = [c.status for c in rt.store.calls(session_id)]
    assert before == ["started"], proc.stderr
    s = rt.open_session(session_id)
    (row,) = rt.store.calls(s.session_id)
    assert (row.status, row.outcome) == ("finished", "uncertain")
    notice = pending_notice(rt.store, s.session_id)
    assert notice is not None and notice.items[0].call_id == row.call_id
    assert "stopped while this call was running" in notice.items[0].reason
    assert (workspace / "effects.txt").read_text() == "once\n"


def test_show_prints_the_notice(workspace: Path, tmp_path: Path) -> None:
    env = {**os.environ, "ZUNO_DB": str(tmp_path / "cli.db")}

    def zuno(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "zuno", *args],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    timed_out = '{"command": "sleep 30", "timeout": 1}'
    failed = json.loads(zuno("call", "shell", timed_out, "--yes", "--json").stdout)
    shown = zuno("show", failed["session_id"])
    assert "Recovery notice" in shown.stdout and failed["call_id"] in shown.stdout
    body = json.loads(zuno("show", failed["session_id"], "--json").stdout)
    assert body["recovery"]["items"][0]["call_id"] == failed["call_id"]
