"""Leases and session ownership on PostgreSQL: the same rules as on SQLite, on the server's clock.

Against the real server of the ``pg_dsn`` fixture: a lease expires by the
server's ``clock_timestamp()``; a runner of another host is never settled by
this host's ``/proc`` (nor a legacy ``pid:start`` runner, which names no
host); a late result goes beside the settled row; a second process is
refused a leased session; steps are numbered in the write transaction.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from zuno.contract.events import Event
from zuno.durability.recovery import settle_interrupted
from zuno.durability.store import SessionBusy
from zuno.durability.store.postgres import PostgresStore
from zuno.durability.store.records import CallRecord
from zuno.durability.workers import WorkerIdentity, WorkerLease, runner_settleable, this_worker

BOUND = 60.0


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def foreign(pid: int, start: str = "1") -> WorkerIdentity:
    return WorkerIdentity("e" * 32, "other-boot", "4026531999", pid, start)


def started(store: PostgresStore, call_id: str, runner: str) -> CallRecord:
    row = CallRecord(
        call_id, "s1", 1, 0, 1, "shell", "{}", "h", "side_effecting", "never", "exclusive",
        "started", started_at=time.time(), runner=runner,
    )  # fmt: skip
    store.call_started(row, Event("call.started", "s1", call_id, {"attempt": 1}))
    return row


@pytest.fixture
def store(pg_dsn: str) -> PostgresStore:
    s = PostgresStore(pg_dsn)
    s.create_session("s1", "build", "/w")
    return s


def test_a_lease_expires_on_the_servers_clock(store: PostgresStore) -> None:
    worker = foreign(11)
    assert runner_settleable(store, worker.id)
    lease = WorkerLease(store, worker, lease_seconds=30)
    ((left,),) = store.query(
        "SELECT expires_at - zuno_now() FROM workers WHERE worker_id = ?", (worker.id,)
    )
    assert 25 < left <= 30
    assert not runner_settleable(store, worker.id)
    lease.stop()
    assert runner_settleable(store, worker.id)
    with store.transaction() as db:
        db.execute(
            "UPDATE workers SET expires_at = zuno_now() + 0.3 WHERE worker_id = ?", (worker.id,)
        )
    assert not runner_settleable(store, worker.id)
    wait_until(lambda: runner_settleable(store, worker.id), "the lease to run out")
    store.close()


def test_foreign_and_legacy_runners_are_not_judged_by_this_hosts_proc(
    store: PostgresStore,
) -> None:
    me = this_worker()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone_here = foreign(dead.pid)
    alive_here = foreign(me.pid, me.start)
    leases = [WorkerLease(store, w, lease_seconds=30) for w in (gone_here, alive_here)]
    started(store, "c-gone", gone_here.id)
    started(store, "c-alive", alive_here.id)
    assert settle_interrupted(store, "s1") == []
    for lease in leases:
        lease.stop()
    assert sorted(settle_interrupted(store, "s1")) == ["c-alive", "c-gone"]
    # A legacy runner names no host: on a shared server it has no lease, and this
    # process's /proc (where that pid is alive) is not asked.
    started(store, "c-legacy", f"{me.pid}:{me.start}")
    assert settle_interrupted(store, "s1") == ["c-legacy"]
    outcomes = {c.call_id: c.outcome for c in store.calls("s1")}
    assert outcomes == {"c-gone": "uncertain", "c-alive": "uncertain", "c-legacy": "uncertain"}
    store.close()


def test_a_late_result_never_overwrites(store: PostgresStore) -> None:
    row = started(store, "c1", foreign(12).id)
    assert settle_interrupted(store, "s1") == ["c1"]
    before = store.calls("s1")
    row.status, row.outcome, row.result, row.finished_at = "finished", "ok", "fine", time.time()
    store.call_finished(row, Event("call.finished", "s1", "c1", {"outcome": "ok"}))
    assert store.calls("s1") == before and before[0].outcome == "uncertain"
    kinds = [e.kind for e in store.events("s1")]
    assert kinds == ["call.started", "call.interrupted", "call.late_result"]
    late = store.events("s1")[-1].data
    assert (late["outcome"], late["result"], late["settled_as"]) == ("ok", "fine", "uncertain")
    store.close()


_OPEN = """
import json, sys
from zuno.durability.store import SessionBusy
from zuno.durability.store.postgres import PostgresStore
from zuno.durability.workers import WorkerLease, this_worker

store = PostgresStore(sys.argv[1])
with WorkerLease(store, lease_seconds=30):
    try:
        store.acquire_session("s1", this_worker().id)
    except SessionBusy as exc:
        print(json.dumps({"busy": str(exc)}))
    else:
        print(json.dumps({"opened": True}))
"""


def open_elsewhere(dsn: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", _OPEN, dsn], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_leased_session_refuses_a_second_process(store: PostgresStore, pg_dsn: str) -> None:
    me = this_worker()
    with WorkerLease(store, lease_seconds=30):
        store.acquire_session("s1", me.id)
        got = open_elsewhere(pg_dsn)
        assert "busy" in got and f"pid {me.pid}" in str(got["busy"])
        assert "--wait" in str(got["busy"])
        # The fence: a worker that lost the session opens no step.
        with pytest.raises(SessionBusy):
            store.begin_step("s1", worker=foreign(13).id)
        assert store.query("SELECT COUNT(*) FROM steps") == [(0,)]
    # Our lease ended (stopped): the other process takes the session.
    assert open_elsewhere(pg_dsn) == {"opened": True}
    record = store.get_session("s1")
    assert record is not None and record.owner != me.id and record.state == "running"
    store.close()


def test_step_numbers_come_from_the_write_transaction(store: PostgresStore, pg_dsn: str) -> None:
    two = PostgresStore(pg_dsn)
    got = [store.begin_step("s1"), two.begin_step("s1"), store.begin_step("s1")]
    assert got == [1, 2, 3]
    assert store.query("SELECT step FROM steps ORDER BY step") == [(1,), (2,), (3,)]
    two.close()
    store.close()


def test_recovery_queries_use_the_partial_indexes(store: PostgresStore) -> None:
    names = {
        r[0]
        for r in store.query(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'calls'"
            " AND schemaname = current_schema()"
        )
    }
    assert {"calls_unsettled", "calls_failed_never_seq"} <= names
    ((definition,),) = store.query(
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'calls_unsettled'"
        " AND schemaname = current_schema()"
    )
    assert "WHERE" in definition and "started" in definition
    store.close()


def test_short_ids_are_a_range_in_byte_order(store: PostgresStore, tmp_path: Path) -> None:
    for sid in ("ses_Ab", "ses_a_b", "ses_ab", "ses_b", "ses-a"):
        store.create_session(sid, "build", str(tmp_path))
    assert sorted(store.find_sessions("ses_a")) == ["ses_a_b", "ses_ab"]
    assert store.find_sessions("ses_A") == ["ses_Ab"]
    assert store.find_sessions("ses_a_") == ["ses_a_b"]
    store.close()
