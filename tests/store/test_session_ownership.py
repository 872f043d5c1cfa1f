"""Session ownership: one worker at a time acts in a session.

A second process is refused (through the Python API and the CLI) while the
owner lives; it takes over once the owner's lease has expired. A worker that
lost its session opens no step and starts no call (the fence), and step
numbers come from the write transaction, never from a per-process cache.
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

import anyio
import pytest

from zuno.config.loading import Config
from zuno.contract.calls import CallRequest
from zuno.contract.events import Event
from zuno.durability.store import SessionBusy, SQLiteStore
from zuno.durability.store.records import CallRecord
from zuno.durability.workers import WorkerIdentity, this_worker
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

BOUND = 60.0


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def runtime(workspace: Path, db: Path) -> Runtime:
    return Runtime(workspace, config=Config(), db_path=db, approver=ApproveAll())


_OPEN = """
import json, sys
from pathlib import Path
from zuno.config.loading import Config
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime
from zuno.durability.store import SessionBusy

rt = Runtime(Path(sys.argv[1]), config=Config(), db_path=Path(sys.argv[2]), approver=ApproveAll())
try:
    s = rt.open_session(sys.argv[3])
except SessionBusy as exc:
    print(json.dumps({"busy": str(exc), "owner": exc.owner}))
else:
    print(json.dumps({"opened": s.session_id}))
rt.close()
"""


def open_elsewhere(workspace: Path, db: Path, session_id: str) -> dict[str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", _OPEN, str(workspace), str(db), session_id],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_second_process_is_refused_while_the_owner_lives(workspace: Path, tmp_path: Path) -> None:
    db = tmp_path / "z.db"
    rt = runtime(workspace, db)
    session = rt.open_session()
    got = open_elsewhere(workspace, db, session.session_id)
    me = this_worker()
    assert got["owner"] == me.id
    message = got["busy"]
    assert session.session_id in message and f"pid {me.pid}" in message
    assert "lease expires at" in message and "--wait" in message and "since" in message
    # The CLI says the same in one line, and runs nothing.
    args = json.dumps({"path": "marker.txt", "content": "x"})
    cli = subprocess.run(
        [sys.executable, "-m", "zuno", "call", "write", args, "-s", session.session_id, "--yes"],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(db)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode != 0 and "is in use by worker" in cli.stderr, cli.stderr
    assert "Traceback" not in cli.stderr
    assert not (workspace / "marker.txt").exists()
    assert rt.store.calls(session.session_id) == []
    # Released: the other process may take it.
    rt.close()
    assert open_elsewhere(workspace, db, session.session_id) == {"opened": session.session_id}


_HOLD = """
import sys, time
from pathlib import Path
from zuno.config.loading import Config
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

rt = Runtime(Path(sys.argv[1]), config=Config(), db_path=Path(sys.argv[2]), approver=ApproveAll())
s = rt.open_session()
print(s.session_id, flush=True)
time.sleep(600)
"""


def test_another_worker_takes_over_once_the_lease_expired(workspace: Path, tmp_path: Path) -> None:
    db = tmp_path / "z.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(workspace), str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ZUNO_LEASE_SECONDS": "600"},
    )
    try:
        assert holder.stdout is not None
        session_id = holder.stdout.readline().strip()
        assert session_id.startswith("ses_"), holder.stderr.read() if holder.stderr else ""
        os.kill(holder.pid, signal.SIGSTOP)  # paused: alive by /proc, renews nothing
        assert "busy" in open_elsewhere(workspace, db, session_id)
        store = SQLiteStore(db)
        with store.transaction() as conn:  # its lease runs out on the database's clock
            conn.execute(
                "UPDATE workers SET expires_at = zuno_now() + 0.3 WHERE pid = ?", (holder.pid,)
            )
        wait_until(lambda: "opened" in open_elsewhere(workspace, db, session_id), "a takeover")
        record = store.get_session(session_id)
        assert record is not None and record.state == "idle"
        owner = WorkerIdentity.parse(record.owner)
        assert owner is not None and owner.pid != holder.pid
        store.close()
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        os.kill(holder.pid, signal.SIGCONT)
        holder.wait()


def test_a_killed_owner_frees_its_session_at_once_on_this_host(
    workspace: Path, tmp_path: Path
) -> None:
    db = tmp_path / "z.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(workspace), str(db)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "ZUNO_LEASE_SECONDS": "600"},
    )
    assert holder.stdout is not None
    session_id = holder.stdout.readline().strip()
    holder.kill()
    holder.wait()
    assert open_elsewhere(workspace, db, session_id) == {"opened": session_id}


def test_open_session_can_wait_for_the_owner_to_finish(workspace: Path, tmp_path: Path) -> None:
    import threading

    db = tmp_path / "z.db"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(workspace), str(db)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "ZUNO_LEASE_SECONDS": "600"},
    )
    assert holder.stdout is not None
    session_id = holder.stdout.readline().strip()
    rt = runtime(workspace, db)
    with pytest.raises(SessionBusy):
        rt.open_session(session_id)
    # The owner ends while we wait (killed here; on another host its lease would run out).
    ender = threading.Timer(0.5, holder.kill)
    ender.start()
    try:
        state = rt.open_session(session_id, wait=BOUND)
    finally:
        ender.join()
        holder.wait()
    assert state.session_id == session_id
    record = rt.store.get_session(session_id)
    assert record is not None and record.owner == this_worker().id
    rt.close()


def test_a_worker_that_lost_its_session_runs_nothing(workspace: Path, tmp_path: Path) -> None:
    rt = runtime(workspace, tmp_path / "z.db")
    session = rt.open_session()
    first = anyio.run(rt.call, session, "write", {"path": "one.txt", "content": "1"})
    assert first.outcome.value == "ok"
    # Another worker took the session over (as after this worker's lease expired).
    with rt.store.transaction() as db:
        db.execute(
            "UPDATE sessions SET owner = ?, state = 'running' WHERE session_id = ?",
            ("w1:other:boot:1:42:42", session.session_id),
        )
    with pytest.raises(SessionBusy, match="not by this worker"):
        anyio.run(rt.call, session, "write", {"path": "two.txt", "content": "2"})
    assert not (workspace / "two.txt").exists()
    steps = rt.store.query(
        "SELECT step FROM steps WHERE session_id = ? ORDER BY step", (session.session_id,)
    )
    assert steps == [(1,)]
    assert [c.tool for c in rt.store.calls(session.session_id)] == ["write"]
    rt.close()


def test_a_started_row_is_fenced_by_the_owner(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "z.db")
    store.create_session("s1", "build", str(tmp_path), owner="w1:a:b:c:1:1")
    row = CallRecord(
        "c1", "s1", 1, 0, 1, "shell", "{}", "h", "side_effecting", "never", "exclusive",
        "started", started_at=time.time(), runner="w1:x:y:z:2:2",
    )  # fmt: skip
    with pytest.raises(SessionBusy):
        store.call_started(row, Event("call.started", "s1", "c1", {}), fence=True)
    with pytest.raises(SessionBusy):
        store.begin_step("s1", worker="w1:x:y:z:2:2")
    assert store.calls("s1") == [] and store.query("SELECT * FROM steps") == []
    assert [e.kind for e in store.events("s1")] == []
    row.runner = "w1:a:b:c:1:1"
    assert store.begin_step("s1", worker="w1:a:b:c:1:1") == 1
    store.call_started(row, Event("call.started", "s1", "c1", {}), fence=True)
    assert [c.status for c in store.calls("s1")] == ["started"]
    store.close()


def test_step_numbers_come_from_the_write_transaction(tmp_path: Path) -> None:
    # Two store objects on one file (two processes' worth): each number is new.
    one = SQLiteStore(tmp_path / "z.db")
    two = SQLiteStore(tmp_path / "z.db")
    one.create_session("s1", "build", str(tmp_path))
    got = [
        one.begin_step("s1"),
        two.begin_step("s1"),
        one.begin_step("s1"),
        two.begin_step("s1"),
    ]
    assert got == [1, 2, 3, 4]
    assert one.query("SELECT step FROM steps ORDER BY step") == [(1,), (2,), (3,), (4,)]
    assert [one.append_message("s1", "user", {}), two.append_message("s1", "user", {})] == [1, 2]
    one.close()
    two.close()


def test_delegated_sessions_of_one_process_share_its_worker(
    workspace: Path, tmp_path: Path
) -> None:
    db = tmp_path / "z.db"
    rt = runtime(workspace, db)
    parent = rt.open_session()
    child = rt.open_session(parent_call_id="call_x", depth=1)
    other = runtime(workspace, db)  # a second runtime of this process: the same worker
    again = other.open_session(parent.session_id)
    results = anyio.run(
        rt.dispatch, child, [CallRequest("write", {"path": "c.txt", "content": "c"})]
    )
    assert results[0].outcome.value == "ok"
    results = anyio.run(other.dispatch, again, [CallRequest("read", {"path": "c.txt"})])
    assert results[0].outcome.value == "ok"
    owners = {r.owner for r in rt.store.list_sessions()}
    assert owners == {this_worker().id}
    other.close()
    rt.close()


def test_an_older_store_is_read_as_it_is_and_upgraded_by_a_writing_open(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as db:  # back to the layout of schema version 1
        db.execute("DROP INDEX sessions_active")
        for column in ("owner", "state", "prompt", "options", "updated_at"):
            db.execute(f"ALTER TABLE sessions DROP COLUMN {column}")
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        db.execute("INSERT INTO sessions VALUES ('ses_old', 1.0, 'build', '/w', NULL, NULL, 't')")
    reading = SQLiteStore(path, migrate=False)
    (record,) = reading.list_sessions()
    assert (record.session_id, record.owner, record.state) == ("ses_old", None, None)
    assert reading.migration_needed is not None and "sessions.owner" in reading.migration_needed
    reading.close()
    with sqlite3.connect(path) as db:
        columns = {r[1] for r in db.execute("PRAGMA table_info(sessions)")}
    assert "owner" not in columns  # a reading open changed nothing
    writing = SQLiteStore(path)
    record = writing.acquire_session("ses_old", "w1:a:b:c:1:1")
    assert (record.owner, record.state) == ("w1:a:b:c:1:1", "running")
    assert writing.query("SELECT value FROM meta WHERE key = 'schema_version'") == [("2",)]
    writing.close()
