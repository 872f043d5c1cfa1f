"""A fleet as people run it: ``zuno submit`` and several ``zuno worker`` processes, one killed.

Every worker is a real ``zuno worker`` process on one shared store (the real
PostgreSQL, or one SQLite file), talking to a scripted model server on
127.0.0.1 (``fleet_model``). Each session runs two side-effecting Never calls
(``shell`` appending one line to a marker file of its own), then answers.
One worker is killed with SIGKILL while it is running a call (seen in the
store, not guessed from time); its session is taken over by another worker
once its lease has expired.

Judged by what is on disk and in the store, never by what the workers print:

- every session ends ``done``;
- each Never call ran at most once: its marker holds exactly one line when its
  row says ``ok``, at most one when the row says ``uncertain`` (the kill came
  while it ran; the recovery notice named it to the model), none when it has
  no row (it never started);
- the audit, by SQL: no Never call has two attempts (0 duplicated effects), and
  every call row's events agree with it: one ``call.started``, one settling event
  whose outcome is the row's, no ``call.late_result`` that differs from a row
  it would have overwritten (0 rows overwritten).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fleet_model import CALLS_PER_TASK, FleetModelServer, marker, prompt_for

from zuno.durability.store import Store, open_store

ZUNO = [sys.executable, "-m", "zuno"]
MODEL = "openai:fake-model"
LEASE = "3"
DEADLINE = 900.0  # a bound, not a target: a whole fleet run on a loaded 2-core machine


_NAMESPACE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


def _namespaces_work() -> bool:
    """Whether a worker can run as init of a PID namespace of its own (another "host")."""
    try:
        probe = subprocess.run([*_NAMESPACE, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


_STARTED = re.compile(r"\((w1:[^)]+)\) started")


@dataclass
class WorkerProcess:
    """A ``zuno worker``, possibly as init of its own PID namespace (``unshare``)."""

    proc: subprocess.Popen[str]
    log: Path
    namespaced: bool
    killed: bool = False
    """Killed on purpose by the test (its exit is expected)."""

    def pid(self) -> int | None:
        """The worker's pid as this test sees it (unshare's child when namespaced)."""
        if not self.namespaced:
            return self.proc.pid
        children = _children(self.proc.pid)
        return children[0] if len(children) == 1 else None

    def worker_id(self) -> str | None:
        """The id the worker announced (``w1:...``), once it has."""
        found = _STARTED.search(self.log.read_text())
        return found.group(1) if found else None

    def signal(self, signum: int) -> None:
        pid = self.pid()
        assert pid is not None, "the worker process is gone"
        os.kill(pid, signum)


@dataclass
class Fleet:
    """The processes and folders of one fleet run."""

    db: str
    root: Path
    server: FleetModelServer
    namespaced: bool = False
    """Each worker in a PID namespace of its own: only leases tell who is alive."""
    workspaces: list[Path] = field(default_factory=lambda: [])
    workers: list[WorkerProcess] = field(default_factory=lambda: [])

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "ZUNO_DB": self.db,
            "OPENAI_BASE_URL": self.server.openai_base_url,
            "OPENAI_API_KEY": "sk-fleet",
            "ZUNO_LEASE_SECONDS": LEASE,
        }

    def zuno(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*ZUNO, *args],
            cwd=cwd or self.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def submit(self, task: int) -> str:
        workspace = self.workspaces[task % len(self.workspaces)]
        proc = self.zuno(
            "submit", prompt_for(task), "--yes", "--model", MODEL, "--workspace", str(workspace)
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    def start_worker(self, *args: str) -> WorkerProcess:
        path = self.root / f"worker{len(self.workers)}.log"
        prefix = _NAMESPACE if self.namespaced else []
        with path.open("w") as log:
            proc = subprocess.Popen(
                [*prefix, *ZUNO, "worker", *args],
                cwd=self.root,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        worker = WorkerProcess(proc, path, self.namespaced)
        self.workers.append(worker)
        return worker

    def logs(self) -> str:
        return "\n".join(
            f"--- worker{i}:\n{(self.root / f'worker{i}.log').read_text()[-3000:]}"
            for i in range(len(self.workers))
        )

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                pid = worker.pid()
                if pid is not None:
                    with suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                worker.proc.kill()
                worker.proc.wait(timeout=30)


@pytest.fixture
def sqlite_db(tmp_path: Path) -> str:
    return str(tmp_path / "fleet.db")


def _fleet(
    db: str, tmp_path: Path, server: FleetModelServer, *, namespaced: bool = False
) -> Iterator[Fleet]:
    fleet = Fleet(db, tmp_path, server, namespaced)
    for n in range(3):
        workspace = tmp_path / f"ws{n}"
        (workspace / "marks").mkdir(parents=True)
        fleet.workspaces.append(workspace)
    try:
        yield fleet
    finally:
        fleet.stop_all()


def _query(store: Store, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return store.query(sql, params)


def _wait_for(what: str, fleet: Fleet, check: Any, deadline: float) -> Any:
    """Poll ``check()`` until it returns something truthy (bounded by ``deadline``)."""
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if any(w.proc.poll() is not None for w in fleet.workers if not w.killed):
            pytest.fail(f"a worker exited while waiting for {what}:\n{fleet.logs()}")
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}:\n{fleet.logs()}")


def _leased(store: Store, worker: WorkerProcess) -> str | None:
    """The worker's id once it has announced it and its lease row is written."""
    worker_id = worker.worker_id()
    if worker_id is None or worker.pid() is None:
        return None
    rows = _query(store, "SELECT worker_id FROM workers WHERE worker_id = ?", (worker_id,))
    return worker_id if rows else None


def _mid_call(store: Store, worker_id: str) -> bool:
    """Whether the worker has finished a session and is now inside a Never call."""
    finished = _query(
        store,
        "SELECT COUNT(*) FROM events WHERE kind = 'fleet.finished' AND data LIKE ?",
        (f"%{worker_id}%",),
    )[0][0]
    running = _query(
        store,
        "SELECT COUNT(*) FROM calls c JOIN sessions s ON s.session_id = c.session_id"
        " WHERE s.owner = ? AND c.status = 'started' AND c.tool = 'shell'",
        (worker_id,),
    )[0][0]
    return finished >= 1 and running >= 1


def _run_fleet(fleet: Fleet, *, sessions: int, workers: int) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE
    with ThreadPoolExecutor(2) as pool:
        ids = list(pool.map(fleet.submit, range(sessions)))
    assert len(set(ids)) == sessions
    store = open_store(fleet.db)
    try:
        queued = _query(store, "SELECT COUNT(*) FROM sessions WHERE state = 'queued'")[0][0]
        assert queued == sessions
        for _ in range(workers):
            fleet.start_worker()
        victim = fleet.workers[0]
        victim_id = _wait_for(
            "the first worker's lease", fleet, lambda: _leased(store, victim), deadline
        )
        _wait_for(
            "the first worker inside a call", fleet, lambda: _mid_call(store, victim_id), deadline
        )
        killed = victim.pid()
        victim.killed = True
        victim.signal(signal.SIGKILL)
        victim.proc.wait(timeout=30)  # unshare's own status says little; its child is gone
        assert not Path(f"/proc/{killed}").exists()

        def all_done() -> bool:
            rows = _query(store, "SELECT COUNT(*) FROM sessions WHERE state = 'done'")
            return rows[0][0] == sessions

        _wait_for("every session done", fleet, all_done, deadline)
        # The survivors stop cleanly on SIGTERM and give their leases up.
        for worker in fleet.workers[1:]:
            worker.signal(signal.SIGTERM)
        for worker in fleet.workers[1:]:
            assert worker.proc.wait(timeout=60) == 128 + signal.SIGTERM, fleet.logs()
        live = _query(
            store,
            "SELECT worker_id FROM workers WHERE expires_at > zuno_now() AND worker_id <> ?",
            (victim_id,),
        )
        assert live == [], f"leases left live after SIGTERM: {live}"
        return _audit(store, fleet, ids, victim_id)
    finally:
        store.close()


def _audit(store: Store, fleet: Fleet, ids: list[str], victim_id: str) -> dict[str, Any]:
    states = dict(_query(store, "SELECT state, COUNT(*) FROM sessions GROUP BY state"))
    assert states == {"done": len(ids)}, states

    # 0 duplicated effects: a Never call (one model call id in one session) has one row.
    duplicated = _query(
        store,
        "SELECT session_id, model_call_id, COUNT(*) FROM calls WHERE replay = 'never'"
        " GROUP BY session_id, model_call_id HAVING COUNT(*) > 1",
    )
    assert duplicated == [], f"Never calls run more than once: {duplicated}"

    # 0 rows overwritten: each row's events agree with it.
    rows = _query(store, "SELECT call_id, attempt, status, outcome FROM calls")
    events = _query(
        store,
        "SELECT call_id, kind, data FROM events WHERE kind IN"
        " ('call.started', 'call.finished', 'call.interrupted', 'call.late_result') ORDER BY seq",
    )
    by_call: dict[tuple[str, int], list[tuple[str, dict[str, Any]]]] = {}
    for call_id, kind, data in events:
        parsed = json.loads(data)
        by_call.setdefault((str(call_id), int(parsed.get("attempt", 1))), []).append((kind, parsed))
    overwritten: list[Any] = []
    late = 0
    for call_id, attempt, status, outcome in rows:
        assert status == "finished", (call_id, status)
        seen = by_call.get((str(call_id), int(attempt)), [])
        settles = [d for k, d in seen if k in ("call.finished", "call.interrupted")]
        late += sum(1 for k, _ in seen if k == "call.late_result")
        if len(settles) != 1 or settles[0].get("outcome") != outcome:
            overwritten.append((call_id, attempt, outcome, seen))
    started = [(c, k) for c, k, _ in events if k == "call.started"]
    assert len(started) == len({c for c, _ in started}), "a call started twice"
    assert overwritten == [], f"rows whose events disagree (overwritten): {overwritten}"

    # Each Never call ran at most once, by the marker lines on disk.
    outcomes: dict[str, int] = {}
    uncertain: list[tuple[str, str]] = []
    for task, session_id in enumerate(ids):
        workspace = fleet.workspaces[task % len(fleet.workspaces)]
        for k in range(1, CALLS_PER_TASK + 1):
            path = workspace / marker(task, k)
            lines = path.read_text().count("ran\n") if path.exists() else 0
            found = _query(
                store,
                "SELECT call_id, outcome FROM calls WHERE session_id = ? AND model_call_id = ?",
                (session_id, f"sh_{task:02d}_{k}"),
            )
            outcome = str(found[0][1]) if found else "none"
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if outcome == "ok":
                assert lines == 1, (session_id, k, lines)
            elif outcome == "uncertain":
                # The kill came while it ran: it may have written its line, never two.
                assert lines <= 1, (session_id, k, lines)
                outcomes["uncertain_with_line"] = outcomes.get("uncertain_with_line", 0) + lines
                uncertain.append((session_id, str(found[0][0])))
            else:
                assert outcome == "none" and lines == 0, (session_id, k, outcome, lines)

    # An uncertain call was named to the model in a recovery notice, from the store.
    for session_id, call_id in uncertain:
        told = _query(
            store,
            "SELECT COUNT(*) FROM recovery_items WHERE session_id = ? AND call_id = ?",
            (session_id, call_id),
        )[0][0]
        assert told == 1, (session_id, call_id)
        task = ids.index(session_id)
        heard = [
            r
            for r in fleet.server.requests
            if prompt_for(task) in json.dumps(r["messages"])
            and call_id in json.dumps(r["messages"])
        ]
        assert heard, f"the model never heard of the uncertain call {call_id}"

    # Only the killed worker's session was taken over (never one of a live worker), and
    # each session was finished once, by one worker.
    claims = [
        json.loads(r[0])
        for r in _query(store, "SELECT data FROM events WHERE kind = 'fleet.claimed'")
    ]
    taken = [c for c in claims if c["taken_from"] is not None]
    assert taken, "no session of the killed worker was taken over"
    assert {c["taken_from"] for c in taken} == {victim_id}, taken
    finishes = _query(
        store,
        "SELECT session_id, COUNT(*) FROM events WHERE kind = 'fleet.finished'"
        " GROUP BY session_id HAVING COUNT(*) <> 1",
    )
    assert finishes == [], f"sessions finished more than once: {finishes}"
    return {
        "namespaced": fleet.namespaced,
        "sessions": len(ids),
        "outcomes": outcomes,
        "uncertain": len(uncertain),
        "taken_over": len(taken),
        "late_results": late,
    }


@pytest.fixture
def pg_fleet(pg_dsn: str, tmp_path: Path, fleet_model: FleetModelServer) -> Iterator[Fleet]:
    # Like machines of their own: no worker can see another's process in /proc.
    yield from _fleet(pg_dsn, tmp_path, fleet_model, namespaced=_namespaces_work())


@pytest.fixture
def sqlite_fleet(sqlite_db: str, tmp_path: Path, fleet_model: FleetModelServer) -> Iterator[Fleet]:
    yield from _fleet(sqlite_db, tmp_path, fleet_model)


def test_postgres_fleet_three_workers_one_killed(pg_fleet: Fleet) -> None:
    figures = _run_fleet(pg_fleet, sessions=30, workers=3)
    print(f"postgres fleet: {figures}")
    assert figures["taken_over"] >= 1


def test_sqlite_fleet_two_workers_one_killed(sqlite_fleet: Fleet) -> None:
    figures = _run_fleet(sqlite_fleet, sessions=10, workers=2)
    print(f"sqlite fleet: {figures}")
    assert figures["taken_over"] >= 1


def test_model_error_fails_the_session_with_its_reason_and_sessions_shows_it(
    sqlite_fleet: Fleet,
) -> None:
    fleet = sqlite_fleet
    good = fleet.submit(1)
    proc = fleet.zuno(
        "submit", "fleet broken task", "--model", MODEL, "--workspace", str(fleet.workspaces[0])
    )
    assert proc.returncode == 0, proc.stderr
    broken = proc.stdout.strip()
    for _ in range(2):
        ran = fleet.zuno("worker", "--once")
        assert ran.returncode == 0, ran.stderr
    store = open_store(fleet.db)
    try:
        states = dict(_query(store, "SELECT session_id, state FROM sessions"))
        assert states == {good: "done", broken: "failed"}
        (reason,) = _query(
            store,
            "SELECT data FROM events WHERE session_id = ? AND kind = 'fleet.finished'",
            (broken,),
        )[0]
        assert "broken on purpose" in json.loads(reason)["reason"]
        owners = {
            str(r[0]): str(r[1]) for r in _query(store, "SELECT session_id, owner FROM sessions")
        }
    finally:
        store.close()
    assert len(set(owners.values())) == 2  # two `--once` workers, one session each
    listed = fleet.zuno("sessions", "--all", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["session_id"]: r for r in json.loads(listed.stdout)}
    assert rows[good]["state"] == "done" and rows[broken]["state"] == "failed"
    assert {k: rows[k]["owner"] for k in owners} == owners
    table = fleet.zuno("sessions", "--all")
    assert table.returncode == 0, table.stderr
    for session_id, state in ((good, "done"), (broken, "failed")):
        pid = owners[session_id].split(":")[4]
        line = next(x for x in table.stdout.splitlines() if session_id in x)
        assert state in line.split() and any(
            w.endswith(":" + pid) or w.startswith(pid + "@") for w in line.split()
        ), line


def test_sigterm_hands_the_running_session_back_to_the_queue(sqlite_fleet: Fleet) -> None:
    fleet = sqlite_fleet
    fleet.server.delay = 60  # the first call is still sleeping when the signal comes
    session_id = fleet.submit(3)
    deadline = time.monotonic() + 120
    store = open_store(fleet.db)
    try:
        first = fleet.start_worker()

        def in_call() -> bool:
            rows = _query(
                store,
                "SELECT COUNT(*) FROM calls WHERE session_id = ? AND status = 'started'",
                (session_id,),
            )
            return rows[0][0] == 1

        _wait_for("the call to start", fleet, in_call, deadline)
        first_id = _wait_for("the worker's lease", fleet, lambda: _leased(store, first), deadline)
        first.signal(signal.SIGTERM)
        assert first.proc.wait(timeout=60) == 128 + signal.SIGTERM, fleet.logs()
        (state, owner) = _query(
            store, "SELECT state, owner FROM sessions WHERE session_id = ?", (session_id,)
        )[0]
        assert state == "queued", (state, owner)
        expired = _query(
            store,
            "SELECT COUNT(*) FROM workers WHERE worker_id = ? AND expires_at <= zuno_now()",
            (first_id,),
        )[0][0]
        assert expired == 1, "the stopped worker's lease is still live"
        # Another worker takes it at once (no lease to wait for) and finishes it.
        fleet.server.delay = 0.1
        again = fleet.zuno("worker", "--once")
        assert again.returncode == 0, again.stderr
        (state,) = _query(store, "SELECT state FROM sessions WHERE session_id = ?", (session_id,))[
            0
        ]
        assert state == "done"
        settled = _query(
            store,
            "SELECT outcome FROM calls WHERE session_id = ? AND model_call_id = 'sh_03_1'",
            (session_id,),
        )
        assert len(settled) == 1 and settled[0][0] != "ok", settled
    finally:
        store.close()
    assert not (fleet.workspaces[0] / marker(3, 1)).exists()  # the cancelled call wrote nothing
    assert (fleet.workspaces[0] / marker(3, 2)).read_text() == "ran\n"


def test_a_worker_without_the_api_key_hands_the_session_back_and_stops(
    sqlite_fleet: Fleet,
) -> None:
    fleet = sqlite_fleet
    session_id = fleet.submit(4)
    keyless = {k: v for k, v in fleet.env.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run(
        [*ZUNO, "worker", "--once"],
        cwd=fleet.root,
        env=keyless,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "OPENAI_API_KEY" in proc.stderr and "went back to the queue" in proc.stderr
    assert "Traceback" not in proc.stderr
    store = open_store(fleet.db)
    try:
        (state,) = _query(store, "SELECT state FROM sessions WHERE session_id = ?", (session_id,))[
            0
        ]
        assert state == "queued"  # not failed: another worker may hold the key
        live = _query(store, "SELECT COUNT(*) FROM workers WHERE expires_at > zuno_now()")[0][0]
        assert live == 0
        again = fleet.zuno("worker", "--once")
        assert again.returncode == 0, again.stderr
        (state,) = _query(store, "SELECT state FROM sessions WHERE session_id = ?", (session_id,))[
            0
        ]
        assert state == "done"
    finally:
        store.close()
