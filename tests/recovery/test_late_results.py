"""A late result never overwrites: a row another worker settled stays as settled.

The owner of a running call is paused past its lease; another worker takes
the session over and settles the call ``uncertain``. When the owner wakes up
and its command ends, its result is recorded as a ``call.late_result`` event
beside the settled row: the row is unchanged and the event log reads
``call.interrupted`` then ``call.late_result`` (never ``call.finished``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from zuno.config.loading import Config
from zuno.contract.events import Event
from zuno.durability.recovery import INTERRUPTED, settle_interrupted
from zuno.durability.store import SQLiteStore
from zuno.durability.store.records import CallRecord
from zuno.durability.workers import WorkerLease
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

BOUND = 90.0


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def test_a_result_for_a_settled_row_goes_beside_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "z.db")
    store.create_session("s1", "build", str(tmp_path))
    runner = "w1:elsewhere:boot:1:7:7"  # a worker whose lease is gone
    row = CallRecord(
        "c1", "s1", 1, 0, 1, "shell", "{}", "h", "side_effecting", "never", "exclusive",
        "started", started_at=time.time(), runner=runner,
    )  # fmt: skip
    store.call_started(row, Event("call.started", "s1", "c1", {"attempt": 1}))
    assert settle_interrupted(store, "s1") == ["c1"]
    before = store.calls("s1")
    row.status, row.outcome, row.result = "finished", "ok", "done: it worked"
    row.finished_at = time.time()
    store.call_finished(row, Event("call.finished", "s1", "c1", {"outcome": "ok"}))
    assert store.calls("s1") == before
    assert before[0].outcome == "uncertain" and before[0].result == INTERRUPTED
    events = [(e.kind, e.data) for e in store.events("s1")]
    assert [k for k, _ in events] == ["call.started", "call.interrupted", "call.late_result"]
    late = events[-1][1]
    assert late["outcome"] == "ok" and late["result"] == "done: it worked"
    assert late["runner"] == runner and late["settled_as"] == "uncertain"
    assert late["attempt"] == 1 and late["is_error"] is False
    store.close()


_OWNER = """
import anyio, sys
from pathlib import Path
from zuno.config.loading import Config
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

async def main() -> None:
    rt = Runtime(Path(sys.argv[1]), config=Config(), db_path=Path(sys.argv[2]),
                 approver=ApproveAll())
    s = rt.open_session()
    print(s.session_id, flush=True)
    command = "while [ ! -f go ]; do sleep 0.05; done; echo effect >> effects.txt; echo finished"
    r = await rt.call(s, "shell", {"command": command})
    print(r.outcome.value, flush=True)
    rt.close()

anyio.run(main)
"""


def test_a_paused_owner_that_wakes_up_does_not_overwrite(workspace: Path, tmp_path: Path) -> None:
    db = tmp_path / "z.db"
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(workspace), str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ZUNO_LEASE_SECONDS": "600"},
    )
    assert owner.stdout is not None and owner.stderr is not None
    store = SQLiteStore(db)
    try:
        session_id = owner.stdout.readline().strip()
        assert session_id.startswith("ses_"), owner.stderr.read()
        wait_until(lambda: bool(store.unfinished_calls(session_id)), "the call to start")
        os.kill(owner.pid, signal.SIGSTOP)
        (call,) = store.unfinished_calls(session_id)
        # Its lease runs out while it sleeps (on the database's clock).
        with store.transaction() as conn:
            conn.execute(
                "UPDATE workers SET expires_at = zuno_now() - 1 WHERE worker_id = ?",
                (call.runner,),
            )
        other = Runtime(workspace, config=Config(), db_path=db, approver=ApproveAll())
        other.open_session(session_id)  # takes over and settles the call
        settled = store.calls(session_id)
        assert [(c.status, c.outcome) for c in settled] == [("finished", "uncertain")]
        other.close()
        (workspace / "go").write_text("")
        os.kill(owner.pid, signal.SIGCONT)
        out, err = owner.communicate(timeout=BOUND)
        assert out.split() == ["uncertain"] or out.split() == ["ok"], err
        # The command did run to its end; the store kept what the other worker decided.
        assert (workspace / "effects.txt").read_text() == "effect\n"
        assert store.calls(session_id) == settled
        kinds = [e.kind for e in store.events(session_id) if e.call_id == call.call_id]
        # (the owner's step still closes with what it handed its model: call.result)
        assert kinds[kinds.index("call.started") + 1 :][:2] == [
            "call.interrupted",
            "call.late_result",
        ], kinds
        assert kinds.count("call.finished") == 0
        late = [e.data for e in store.events(session_id) if e.kind == "call.late_result"]
        assert late[0]["outcome"] == "ok" and "finished" in late[0]["result"]
        assert late[0]["runner"] == call.runner
        assert json.loads(settled[0].arguments)["command"].startswith("while")
    finally:
        if owner.poll() is None:
            owner.kill()
            os.kill(owner.pid, signal.SIGCONT)
            owner.wait()
        store.close()


def test_a_job_that_ends_after_it_was_marked_lost_stays_lost(
    workspace: Path, tmp_path: Path
) -> None:
    from zuno.session.jobs import JobEnd, JobLane, JobState, _record

    store = SQLiteStore(tmp_path / "z.db")
    store.create_session("s1", "build", str(workspace))
    lane = JobLane(store, tmp_path / "jobs")
    lease = WorkerLease(store, lease_seconds=600)

    async def run() -> str:
        async with lane:

            async def body(io: object) -> JobEnd:
                # Meanwhile another worker judged this one gone and marked the job lost.
                with store.transaction() as db:
                    db.execute("UPDATE jobs SET state = 'lost', detail = 'gone'")
                return JobEnd(exit_code=0)

            record = await lane.start(
                kind="shell", description="x", session_id="s1", call_id="c1", body=body
            )
            await lane.wait(record.job_id)
            return record.job_id

    import anyio

    job_id = anyio.run(run)
    (row,) = store.query("SELECT * FROM jobs WHERE job_id = ?", (job_id,))
    assert _record(row).state is JobState.LOST
    late = [e for e in store.events("s1") if e.kind == "job.late_result"]
    assert len(late) == 1 and late[0].data["state"] == "succeeded"
    lease.stop()
    store.close()
