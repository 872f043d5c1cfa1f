"""Crash safety: the store survives ``kill -9`` at any instant (see ``crash_harness``)."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import anyio
from crash_harness import (
    ChildPlan,
    SelfKill,
    acks_path,
    check_store,
    child_main,
    describe,
    effects_path,
    make_runtime,
    run_campaign,
    warm_up,
)

from zuno.dispatch.dispatcher import CallRequest
from zuno.durability.recovery import RecoveryNotice, issue_notice, pending_notice


def test_200_random_kills_never_run_a_call_twice_nor_lose_a_row(tmp_path: Path) -> None:
    seed = random.randrange(1 << 32)
    fig = run_campaign(tmp_path, 200, seed=seed)
    report = f"seed {seed}\n{describe(fig)}"
    assert fig.kills == 200, report
    assert fig.violations == 0, report
    # The kills covered the windows that matter (self-kills guarantee the two
    # inside a call whatever the machine's load), and the sessions progressed.
    assert fig.kills_after_intent_before_effect > 0, report
    assert fig.kills_after_effect_before_result > 0, report
    assert 0 < fig.uncertain_with_effect < fig.uncertain_rows, report
    assert fig.calls_completed > 0 and fig.notices_issued > 0, report
    assert fig.effects == fig.calls_completed + fig.uncertain_with_effect, report


def test_the_checks_catch_each_violation(workspace: Path, tmp_path: Path) -> None:
    """The campaign's checks are not vacuous: each one fires on a doctored store."""
    rt = make_runtime(workspace, tmp_path / "z.db")
    s = rt.open_session()
    sid = s.session_id
    results = anyio.run(
        rt.dispatch, s, [CallRequest("append", {"id": "a"}), CallRequest("append", {"id": "b"})]
    )
    for r in results:
        (acks_path(workspace, sid)).open("a").write(r.call_id + "\n")
    clean = check_store(rt.store, workspace, sid, settled=True, pending=None)
    assert clean.details == [] and clean.lost_results == 0

    effects = effects_path(workspace, sid)
    effects.write_text("a\nb\na\norphan\n")  # a ran twice; orphan has no row
    with rt.store.transaction() as db:  # b's committed result goes missing
        db.execute("DELETE FROM calls WHERE call_id = ?", (results[1].call_id,))
        # A call a dead process left running, settled below as uncertain...
        db.execute(
            "INSERT INTO calls (call_id, attempt, session_id, step, idx, tool, arguments,"
            " args_hash, effect, replay, concurrency, status, started_at, runner)"
            " VALUES ('call_dead', 1, ?, 9, 0, 'append', '{\"id\": \"c\"}', 'h',"
            " 'side_effecting', 'never', 'exclusive', 'started', ?, '1:0')",
            (sid, time.time()),
        )
    stray = check_store(rt.store, workspace, sid, settled=False, dead_pids=frozenset({2}))
    assert stray.stray_started_rows == 1
    rt.open_session(sid)
    # ...and a recovery turn told about nothing.
    issue_notice(rt.store, RecoveryNotice(sid, 1, ()))
    bad = check_store(rt.store, workspace, sid, settled=True, pending=None)
    assert bad.double_effects == 1
    assert bad.effects_without_row == 2  # orphan, and b whose row is gone
    assert bad.lost_results == 1
    assert bad.missing_from_notice == 1
    assert bad.stray_started_rows == 0
    rt.close()


def test_a_killed_runtime_not_yet_reaped_is_settled(workspace: Path, tmp_path: Path) -> None:
    """A zombie (killed, its parent has not waited for it yet) runs nothing.

    A supervisor that restarts a killed runtime before reaping it must still
    see the dead runtime's calls settled as uncertain and named in the notice.
    """
    db = tmp_path / "z.db"
    warm_up(tmp_path / "warm")
    rt = make_runtime(workspace, db)
    sid = rt.open_session().session_id
    rt.close()
    plan = ChildPlan(workspace, db, sid, 7, False, SelfKill(1, "after_effect"))
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns into pytest
        try:
            child_main(plan, tmp_path / "child-error.txt")
        finally:
            os._exit(1)
    state = b""
    try:
        for _ in range(6000):  # wait (bounded) until the child is a zombie
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
            if state == b"Z":
                break
            time.sleep(0.01)
        assert state == b"Z", (tmp_path / "child-error.txt").read_text()
        rt = make_runtime(workspace, db)
        rt.open_session(sid)
        rows = rt.store.query(
            "SELECT call_id, status, outcome, arguments FROM calls WHERE tool = 'append'"
        )
        notice = pending_notice(rt.store, sid)
        rt.close()
    finally:
        os.waitpid(pid, 0)
    ((call_id, status, outcome, arguments),) = rows
    assert (status, outcome) == ("finished", "uncertain")
    assert effects_path(workspace, sid).read_text() == json.loads(arguments)["id"] + "\n"
    assert notice is not None and [i.call_id for i in notice.items] == [call_id]
