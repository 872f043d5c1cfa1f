"""Worker identities and leases: another worker settles a row only when its owner is gone.

Judged by the store's rows (the ``workers`` lease, the call's outcome), with
real processes: a SIGSTOPped owner on this host, a killed one, and runners
that name another host (whose ``/proc`` this process must never read).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from zuno.contract.events import Event
from zuno.durability.recovery import settle_interrupted
from zuno.durability.store import SQLiteStore
from zuno.durability.store.records import CallRecord
from zuno.durability.workers import (
    WorkerIdentity,
    WorkerLease,
    lease_seconds,
    runner_settleable,
    this_worker,
)

BOUND = 60.0
"""The most any wait below may take on a loaded machine (never reached when it works)."""


def wait_until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def foreign(pid: int | None = None, start: str | None = None) -> WorkerIdentity:
    """A worker on another machine that happens to use a pid of this one."""
    me = this_worker()
    return WorkerIdentity("f" * 32, "another-boot", "4026531999", pid or me.pid, start or me.start)


def started_row(store: SQLiteStore, session_id: str, call_id: str, runner: str) -> None:
    record = CallRecord(
        call_id=call_id,
        session_id=session_id,
        step=1,
        index=0,
        attempt=1,
        tool="shell",
        arguments="{}",
        args_hash="h",
        effect="side_effecting",
        replay="never",
        concurrency="exclusive",
        status="started",
        started_at=time.time(),
        runner=runner,
    )
    store.call_started(record, Event("call.started", session_id, call_id, {"attempt": 1}))


def outcome(store: SQLiteStore, call_id: str) -> tuple[str, str | None]:
    (row,) = store.query("SELECT status, outcome FROM calls WHERE call_id = ?", (call_id,))
    return row[0], row[1]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "z.db")
    s.create_session("s1", "build", str(tmp_path))
    yield s
    s.close()


def test_identity_names_host_namespace_and_process() -> None:
    me = this_worker()
    assert me.id.startswith("w1:") and me.pid == os.getpid()
    assert WorkerIdentity.parse(me.id) == me
    assert me.machine == Path("/etc/machine-id").read_text().strip()
    assert me.boot == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert me.pidns == str(os.stat("/proc/self/ns/pid").st_ino)
    assert me.start == Path("/proc/self/stat").read_bytes().rsplit(b")", 1)[1].split()[19].decode()
    legacy = WorkerIdentity.parse("1234:5678")
    assert legacy is not None and legacy.legacy and (legacy.pid, legacy.start) == (1234, "5678")
    assert legacy.id == "1234:5678"
    for text in (None, "", "w1:a:b", "x:y", "w2:a:b:c:1:2", "w1:a:b:c:pid:2"):
        assert WorkerIdentity.parse(text) is None
    assert me.same_pid_space(WorkerIdentity.parse(me.id) or me)
    assert not foreign().same_pid_space(me) and not legacy.same_pid_space(me)


def test_a_forked_child_is_another_worker() -> None:
    me = this_worker()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child reports its identity and leaves at once
        os.write(write, this_worker().id.encode())
        os._exit(0)
    os.close(write)
    child = WorkerIdentity.parse(os.read(read, 4096).decode())
    os.waitpid(pid, 0)
    assert child is not None and child.pid == pid and child != me and child.same_pid_space(me)


def test_lease_length_comes_from_the_argument_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ZUNO_LEASE_SECONDS", raising=False)
    assert lease_seconds() == 30.0 and lease_seconds(4) == 4.0
    monkeypatch.setenv("ZUNO_LEASE_SECONDS", "7.5")
    assert lease_seconds() == 7.5 and lease_seconds(2) == 2.0


def test_a_lease_expires_on_the_database_clock(store: SQLiteStore) -> None:
    other = foreign(pid=1, start="1").id
    assert runner_settleable(store, other)  # no lease row at all: nobody holds it
    lease = WorkerLease(store, foreign(pid=1, start="1"), lease_seconds=30)
    ((expires, now),) = store.query(
        "SELECT expires_at, zuno_now() FROM workers WHERE worker_id = ?", (other,)
    )
    assert 25 < expires - now <= 30
    assert not runner_settleable(store, other)
    # Time passes on the database's clock only: the row says the lease ran out.
    lease.stop()
    assert runner_settleable(store, other)
    # A lease that is not renewed runs out by itself.
    with store.transaction() as db:
        db.execute("UPDATE workers SET expires_at = zuno_now() + 0.3 WHERE worker_id = ?", (other,))
    assert not runner_settleable(store, other)
    wait_until(lambda: runner_settleable(store, other), "the short lease to run out")


def test_a_heartbeat_keeps_a_short_lease_alive(store: SQLiteStore) -> None:
    worker = foreign(pid=2, start="2")
    with WorkerLease(store, worker, lease_seconds=0.6):
        first = store.query("SELECT heartbeat_at FROM workers WHERE worker_id = ?", (worker.id,))
        wait_until(
            lambda: (
                store.query("SELECT heartbeat_at FROM workers WHERE worker_id = ?", (worker.id,))
                != first
            ),
            "a second heartbeat",
        )
        assert not runner_settleable(store, worker.id)
    assert runner_settleable(store, worker.id)


def test_a_foreign_runner_is_never_settled_by_proc(store: SQLiteStore) -> None:
    # Its pid is dead here (and another is alive here): /proc of this host says
    # nothing about a process on another machine.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone_here = foreign(pid=dead.pid, start="12345")
    alive_here = foreign()  # this very pid and start, on another machine
    leases = [WorkerLease(store, w, lease_seconds=30) for w in (gone_here, alive_here)]
    started_row(store, "s1", "c-gone", gone_here.id)
    started_row(store, "s1", "c-alive", alive_here.id)
    assert settle_interrupted(store, "s1") == []
    assert outcome(store, "c-gone") == ("started", None)
    assert outcome(store, "c-alive") == ("started", None)
    # Their leases expire: now, and only now, both are settled.
    for lease in leases:
        lease.stop()
    assert sorted(settle_interrupted(store, "s1")) == ["c-alive", "c-gone"]
    assert outcome(store, "c-gone") == ("finished", "uncertain")
    assert outcome(store, "c-alive") == ("finished", "uncertain")


def test_a_legacy_runner_is_judged_by_proc_on_sqlite(store: SQLiteStore) -> None:
    me = this_worker()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    started_row(store, "s1", "c-mine", f"{me.pid}:{me.start}")
    started_row(store, "s1", "c-dead", f"{dead.pid}:999")
    assert settle_interrupted(store, "s1") == ["c-dead"]
    assert outcome(store, "c-mine") == ("started", None)


_OWNER = """
import sys, time
from pathlib import Path
from zuno.contract.events import Event
from zuno.durability.store import SQLiteStore
from zuno.durability.store.records import CallRecord
from zuno.durability.workers import WorkerLease, this_worker

store = SQLiteStore(Path(sys.argv[1]))
lease = WorkerLease(store, lease_seconds=float(sys.argv[2]))
me = this_worker().id
record = CallRecord("c-owned", "s1", 1, 0, 1, "shell", "{}", "h", "side_effecting", "never",
                    "exclusive", "started", started_at=time.time(), runner=me)
store.call_started(record, Event("call.started", "s1", "c-owned", {"attempt": 1}))
print(me, flush=True)
time.sleep(600)
"""


def spawn_owner(db: Path, lease: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(db), str(lease)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    runner = proc.stdout.readline().strip()
    assert runner.startswith("w1:"), proc.stderr.read() if proc.stderr else ""
    return proc, runner


def test_a_paused_owner_on_this_host_keeps_its_call_until_its_lease_expires(
    store: SQLiteStore, tmp_path: Path
) -> None:
    proc, runner = spawn_owner(tmp_path / "z.db", lease=600)
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        # Alive by /proc, lease running: not settled, however often we ask.
        for _ in range(3):
            assert settle_interrupted(store, "s1") == []
            assert not runner_settleable(store, runner)
        assert outcome(store, "c-owned") == ("started", None)
        # Stopped, it renews nothing: bring its expiry near, on the database's clock.
        with store.transaction() as db:
            db.execute(
                "UPDATE workers SET expires_at = zuno_now() + 0.5 WHERE worker_id = ?", (runner,)
            )
        wait_until(lambda: runner_settleable(store, runner), "the paused owner's lease to expire")
        assert settle_interrupted(store, "s1") == ["c-owned"]
        assert outcome(store, "c-owned") == ("finished", "uncertain")
        kinds = [(e.kind, e.data.get("runner")) for e in store.events("s1")]
        assert ("call.interrupted", runner) in kinds
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        os.kill(proc.pid, signal.SIGCONT)
        proc.wait()


def test_a_killed_owner_on_this_host_is_settled_before_its_lease_expires(
    store: SQLiteStore, tmp_path: Path
) -> None:
    proc, runner = spawn_owner(tmp_path / "z.db", lease=600)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()  # reaped: a zombie would still be listed by /proc
    (row,) = store.query(
        "SELECT expires_at > zuno_now() + 60 FROM workers WHERE worker_id = ?", (runner,)
    )
    assert row[0] == 1  # its lease has most of ten minutes left
    assert settle_interrupted(store, "s1") == ["c-owned"]
    assert outcome(store, "c-owned") == ("finished", "uncertain")
    data = [e.data for e in store.events("s1") if e.kind == "call.interrupted"]
    assert data and json.dumps(data[0]).count(runner) == 1
