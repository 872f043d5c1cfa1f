"""The fleet under faults: hosts cut off, frozen clocks apart, a database away.

Each simulated host (:class:`fault_kit.Host`) is a ``zuno worker`` in its own
PID and mount namespaces with its own machine and boot ids; it reaches
PostgreSQL through a relay of its own (:class:`fault_kit.Relay`), which the
test partitions, or takes down. The model is careful (:class:`fault_kit.CarefulModel`):
after a recovery notice it looks for the call's mark and redoes the call when
the mark is not there, so an orphaned command that still writes after the
takeover shows up as a second line.

Judged by what is on disk and in the store. Leases are 3 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
from fault_kit import CarefulModel, Host, Relay, namespaces_work, pg_target, relayed_dsn
from fleet_model import prompt_for

from zuno.durability.store import Store, open_store
from zuno.durability.store.postgres import PostgresStore

pytestmark = pytest.mark.skipif(
    not namespaces_work(), reason="needs root: unshare and bind mounts simulate the hosts"
)

MODEL = "openai:fake-model"
_ZUNO = [sys.executable, "-m", "zuno"]
LEASE = "3"


@dataclass
class Faults:
    """One run: the store, the model, the workspace, the hosts and their relays."""

    dsn: str
    root: Path
    model: CarefulModel
    store: Store
    workspace: Path
    relays: list[Relay] = field(default_factory=lambda: [])
    hosts: list[Host] = field(default_factory=lambda: [])

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "OPENAI_BASE_URL": self.model.openai_base_url,
            "OPENAI_API_KEY": "sk-fleet",
            "ZUNO_LEASE_SECONDS": LEASE,
        }

    def host(self, name: str, *, clock_shift: float = 0.0, relay: bool = True) -> Host:
        dsn = self.dsn
        if relay:
            link = Relay(pg_target(self.dsn))
            self.relays.append(link)
            dsn = relayed_dsn(self.dsn, link)
        host = Host(name, self.root, dsn, self.env, clock_shift)
        self.hosts.append(host)
        return host

    def submit(self, task: int) -> str:
        ws = str(self.workspace)
        proc = subprocess.run(
            [*_ZUNO, "submit", prompt_for(task), "--yes", "--model", MODEL, "--workspace", ws],
            env={**self.env, "ZUNO_DB": self.dsn},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self.store.query(sql, params)

    def wait(self, what: str, check: Callable[[], Any], deadline: float = 120.0) -> Any:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            value = check()
            if value:
                return value
            time.sleep(0.1)
        logs = "\n".join(f"--- {h.name}\n{h.text()[-3000:]}" for h in self.hosts)
        raise AssertionError(f"timed out waiting for {what}\n{logs}")

    def state(self, session_id: str) -> str | None:
        rows = self.rows("SELECT state FROM sessions WHERE session_id = ?", (session_id,))
        return rows[0][0] if rows else None

    def lines(self, task: int) -> int:
        mark = self.workspace / "marks" / f"{task:02d}.txt"
        return len(mark.read_text().splitlines()) if mark.exists() else 0


@pytest.fixture
def faults(pg_dsn: str, tmp_path: Path) -> Iterator[Faults]:
    workspace = tmp_path / "ws"
    (workspace / "marks").mkdir(parents=True)
    store = open_store(pg_dsn)
    with CarefulModel(delay=6.0) as model:
        run = Faults(pg_dsn, tmp_path, model, store, workspace)
        try:
            yield run
        finally:
            model.hold.clear()
            for host in run.hosts:
                host.stop()
            for relay in run.relays:
                relay.close()
            store.close()


def _shell_running(faults: Faults, session_id: str) -> bool:
    return bool(
        faults.rows(
            "SELECT 1 FROM calls WHERE session_id = ? AND tool = 'shell' AND status = 'started'",
            (session_id,),
        )
    )


def _conversation_problems(faults: Faults, session_id: str) -> list[str]:
    """What in the stored conversation breaks the providers' message rules (none: valid).

    OpenAI (strict): every tool call of an assistant message is answered by one
    tool message right after it, and no tool message answers anything else.
    Anthropic: no two assistant messages in a row. Both: the conversation starts
    with the user's prompt and ends with one final answer.
    """
    messages = faults.store.messages(session_id)
    problems: list[str] = []
    if not messages or messages[0][0] != "user":
        problems.append("does not start with the prompt")
    open_calls: list[str] = []
    previous = ""
    answers = 0
    for role, body in messages:
        if role == "tool":
            call_id = str(body.get("call_id"))
            if call_id not in open_calls:
                problems.append(f"a tool result for {call_id} answers no open call")
            else:
                open_calls.remove(call_id)
        else:
            if open_calls:
                problems.append(f"calls {open_calls} left unanswered before a {role} message")
                open_calls = []
            if role == "assistant":
                if previous == "assistant":
                    problems.append("two assistant messages in a row")
                calls = cast(list[dict[str, Any]], body.get("tool_calls") or [])
                open_calls = [str(c["id"]) for c in calls]
                answers += not calls
        previous = role
    if open_calls or previous != "assistant":
        problems.append("does not end with an answer")
    if answers != 1:
        problems.append(f"{answers} final answers")
    return problems


def _finished_events(faults: Faults, session_id: str) -> list[dict[str, Any]]:
    rows = faults.rows(
        "SELECT data FROM events WHERE session_id = ? AND kind = 'fleet.finished' ORDER BY seq",
        (session_id,),
    )
    return [json.loads(r[0]) for r in rows]


def test_a_cut_worker_kills_its_command_before_the_takeover(faults: Faults) -> None:
    """Partitioned mid-command: its command dies before the lease can expire; 0 duplicates."""
    a = faults.host("a")
    a.start()
    session_id = faults.submit(1)
    faults.wait("host a to run the command", lambda: _shell_running(faults, session_id))
    a_id = faults.wait("host a's id", a.worker_id)
    faults.relays[0].partition()
    cut = time.monotonic()
    b = faults.host("b")
    b.start()
    faults.wait("the session to end", lambda: faults.state(session_id) in ("done", "failed"))
    # Past the moment the orphan's command would have written (it sleeps 6 s).
    time.sleep(max(0.0, cut + 6 + 2 - time.monotonic()))
    assert faults.lines(1) == 1, "the mark was written twice: the cut worker's command ran on"
    taken = faults.rows(
        "SELECT data FROM events WHERE session_id = ? AND kind = 'fleet.claimed' ORDER BY seq",
        (session_id,),
    )
    assert json.loads(taken[-1][0])["taken_from"] == a_id
    # The partition heals: the former owner comes back and writes nothing into the session.
    faults.relays[0].heal()
    faults.wait("host a's lease to be renewed", lambda: "renewed again" in a.text(), 60)
    time.sleep(2)  # its queued writes (the killed command's result) go out meanwhile
    assert a.alive(), a.text()
    assert faults.state(session_id) == "done"
    assert [e["worker"] for e in _finished_events(faults, session_id)] != [a_id]
    assert len(_finished_events(faults, session_id)) == 1
    assert _conversation_problems(faults, session_id) == []
    late = faults.rows(
        "SELECT COUNT(*) FROM events WHERE session_id = ? AND kind = 'call.late_result'",
        (session_id,),
    )
    assert late[0][0] <= 1  # at most the killed command's result, beside its settled row
    assert "Traceback" not in a.text() + b.text()


def test_every_worker_survives_an_eight_second_outage(faults: Faults) -> None:
    """The database away for 8 s mid-session: no worker exits; every session done, once."""
    ids = [faults.submit(task) for task in (1, 2)]
    hosts = [faults.host("a"), faults.host("b")]
    for host in hosts:
        host.start()
    faults.wait(
        "both sessions to run a command",
        lambda: all(_shell_running(faults, s) for s in ids),
    )
    for relay in faults.relays:
        relay.outage()
    time.sleep(8)
    for host in hosts:
        assert host.alive(), host.text()
    for relay in faults.relays:
        relay.heal()
    faults.wait("every session to end", lambda: all(faults.state(s) == "done" for s in ids), 180)
    for host in hosts:
        assert host.alive(), host.text()
        assert "Traceback" not in host.text(), host.text()
    assert [faults.lines(task) for task in (1, 2)] == [1, 1]
    for session_id in ids:
        assert _conversation_problems(faults, session_id) == []
        assert len(_finished_events(faults, session_id)) == 1


@pytest.mark.parametrize("shift", [30.0, 3600.0])
def test_the_inspection_rule_holds_across_skewed_clocks(faults: Faults, shift: float) -> None:
    """An uncertain call recorded by a host whose clock is ahead; the inspection by another."""
    faults.model.fail_first = True
    faults.model.delay = 0.1
    faults.model.hold.set()
    ahead = faults.host("ahead", clock_shift=shift)
    ahead.start()
    session_id = faults.submit(1)
    assert faults.model.held.wait(120), ahead.text()
    failed = faults.rows(
        "SELECT outcome FROM calls WHERE session_id = ? AND model_call_id = 'f_01'",
        (session_id,),
    )
    assert failed == [("uncertain",)]
    ahead.kill()  # the whole machine, with its clock
    faults.model.hold.clear()
    on_time = faults.host("on-time")
    on_time.start()
    faults.wait("the session to end", lambda: faults.state(session_id) in ("done", "failed"))
    blocked = faults.rows(
        "SELECT model_call_id, block_kind FROM calls WHERE session_id = ?"
        " AND block_kind IS NOT NULL",
        (session_id,),
    )
    assert blocked == [], "the inspection on the other host did not count"
    assert faults.lines(1) == 1


_PEER = """
import sys, time
from zuno.durability.store import open_store
from zuno.durability.workers import WorkerLease
store = open_store(sys.argv[1])
lease = WorkerLease(store)
store.acquire_session(sys.argv[2], lease.worker_id)
with store.transaction() as db:
    db.execute("SELECT 1 FROM sessions WHERE session_id = ? FOR UPDATE", (sys.argv[2],)).fetchone()
    print("locked", flush=True)
    time.sleep(600)
"""


def _peer_holds_lock(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'zuno-peer'"
            " AND state LIKE 'idle in transaction%%'"
        ).fetchone()
    return bool(row and row[0])


def test_a_lock_held_by_a_cut_peer_is_released_and_waits_are_bounded(faults: Faults) -> None:
    """A peer cut off inside a transaction: --wait returns; the session is taken over."""
    session_id = faults.submit(1)
    relay = Relay(pg_target(faults.dsn))
    faults.relays.append(relay)
    peer_dsn = relayed_dsn(faults.dsn, relay) + "&application_name=zuno-peer"
    peer = subprocess.Popen(
        [sys.executable, "-c", _PEER, peer_dsn, session_id],
        env={**faults.env, "ZUNO_DB": peer_dsn},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert peer.stdout is not None
        assert peer.stdout.readline().strip() == "locked"
        relay.partition()
        cut = time.monotonic()
        # A bounded wait ends while the dead peer's lock is still there (it is not hung).
        resume = subprocess.run(
            [sys.executable, "-m", "zuno", "resume", session_id, "--wait", "2"],
            env={**faults.env, "ZUNO_DB": faults.dsn},
            cwd=faults.workspace,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert resume.returncode != 0
        assert "Traceback" not in resume.stderr
        assert "gave up after waiting 2 s" in resume.stderr, resume.stderr
        assert _peer_holds_lock(faults.dsn)
        # The server ends the peer's transaction: the session can be taken over.
        from zuno.durability.workers import WorkerLease
        from zuno.fleet.worker import claim_next

        with WorkerLease(faults.store) as lease:
            claim = faults.wait(
                "the takeover",
                lambda: claim_next(faults.store, lease.worker_id),
                deadline=60,
            )
        took = time.monotonic() - cut
        print(f"takeover {took:.1f} s after the cut (lease {LEASE} s)")
        assert claim.session_id == session_id
        # Within lease + 10 s (the server's idle_in_transaction_session_timeout ends the
        # peer's transaction at 10 s), with 3 s for a loaded machine's polling.
        assert took <= float(LEASE) + 10 + 3, f"takeover {took:.1f} s after the cut"
        assert not _peer_holds_lock(faults.dsn)
    finally:
        peer.kill()
        peer.wait(timeout=30)


def test_a_slow_link_neither_fences_nor_stalls_a_worker(faults: Faults) -> None:
    """Every byte to and from the database 50 ms late: the lease holds, the session ends once."""
    faults.model.delay = 0.1
    slow = faults.host("slow")
    faults.relays[-1].delay = 0.05
    slow.start()
    session_id = faults.submit(1)
    faults.wait("the session to end", lambda: faults.state(session_id) in ("done", "failed"))
    assert faults.state(session_id) == "done"
    assert faults.lines(1) == 1
    assert _conversation_problems(faults, session_id) == []
    claims = faults.rows(
        "SELECT COUNT(*) FROM events WHERE session_id = ? AND kind = 'fleet.claimed'",
        (session_id,),
    )
    assert claims[0][0] == 1, "the slow worker lost its session (a fence or a takeover)"
    assert "stopped its commands" not in slow.text(), slow.text()
    assert "Traceback" not in slow.text()


def test_connections_ask_for_keepalives_and_server_timeouts(pg_dsn: str) -> None:
    store = open_store(pg_dsn)
    try:
        assert isinstance(store, PostgresStore)
        conn = store.connection
        params = conn.info.get_parameters()
        assert params.get("keepalives") == "1"
        assert params.get("tcp_user_timeout") == "10000"
        idle = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        lock = conn.execute("SHOW lock_timeout").fetchone()
        assert (idle, lock) == (("10s",), ("2s",))
        assert "search_path" in params.get("options", "")  # the DSN's own options are kept
    finally:
        store.close()
