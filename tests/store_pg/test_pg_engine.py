"""The PostgreSQL store's transactions under a real server's failures.

- isolation pinned: a database whose default is REPEATABLE READ takes 8
  writer processes at once without an error;
- a connection the server drops (``pg_terminate_backend``) mid-call: the
  call's result is stored and the worker keeps working;
- a connection cut exactly at the commit, by a relay between the store and
  the server: before the transaction reaches the server, or after the server
  committed but before its answer comes back. No row is written twice and no
  call runs twice;
- the first cause is in the error when the server cannot be reached again.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import ClassVar
from urllib.parse import quote

import anyio
import psycopg
import pytest
from pg_test_tools import Append, Echo, TextArgs

from zuno.config.loading import Config
from zuno.contract.events import Event
from zuno.contract.tool import Tool, ToolContext, ToolResult
from zuno.core.declarations import Concurrency, Declaration, Effect, Outcome, Replay
from zuno.durability.store.errors import StoreUnavailable
from zuno.durability.store.postgres import PostgresStore
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

SERVER_SOCKET = Path("/var/run/postgresql/.s.PGSQL.5432")
COMMIT_ANSWER = b"C\x00\x00\x00\x0bCOMMIT\x00"  # CommandComplete "COMMIT"


# A relay between the store and the server -------------------------------------


class Relay:
    """A Unix-socket relay to the server that can cut its connections at a chosen point.

    ``cut("before")``: the next bytes the client sends are dropped and the
    connection closed (the server never sees them). ``cut("after")``: when the
    server answers a COMMIT (it has committed), the answer is dropped and the
    connection closed. ``refuse = True``: new connections are closed at once.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(folder / ".s.PGSQL.5432"))
        self.listener.listen(16)
        self.mode: str | None = None
        self.refuse = False
        self.cuts = 0
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self, mode: str) -> None:
        with self._lock:
            self.mode = mode

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refuse:
                client.close()
                continue
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.connect(str(SERVER_SOCKET))
            self._pairs.append((client, server))
            threading.Thread(target=self._pump, args=(client, server, "up"), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, "down"), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, way: str) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            with self._lock:
                hit = (self.mode == "before" and way == "up") or (
                    self.mode == "after" and way == "down" and COMMIT_ANSWER in data
                )
                if hit:
                    self.mode = None
                    self.cuts += 1
            if hit:
                break
            try:
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def close(self) -> None:
        self.listener.close()
        for pair in self._pairs:
            for s in pair:
                s.close()


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[Relay]:
    if not SERVER_SOCKET.exists():
        pytest.skip(f"the local server's socket {SERVER_SOCKET} is not there")
    folder = tmp_path / "relay"
    folder.mkdir()
    r = Relay(folder)
    yield r
    r.close()


def through(dsn: str, relay: Relay) -> str:
    """``dsn`` reaching the server through ``relay``."""
    return f"{dsn}&host={quote(str(relay.folder), safe='')}"


# Tools -----------------------------------------------------------------------


class Gate(Tool[TextArgs]):
    """Side-effecting; waits until the test opens the gate (the test kills the connection)."""

    name: ClassVar[str] = "gate"
    description: ClassVar[str] = "Wait for the gate."
    args_model = TextArgs
    declaration: ClassVar[Declaration] = Declaration(
        Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.EXCLUSIVE
    )

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.opened = anyio.Event()
        self.runs = 0

    async def run(self, args: TextArgs, ctx: ToolContext) -> ToolResult:
        self.runs += 1
        self.entered.set()
        with anyio.fail_after(60):
            await self.opened.wait()
        return ToolResult("through " + args.text)


def make_runtime(workspace: Path, dsn: str, *tools: Tool[TextArgs]) -> Runtime:
    config = Config.model_validate(
        {
            "permission": {
                "rules": [{"tool": t.name, "action": "allow"} for t in tools],
            },
            "replay": {"require_inspection": False},
        }
    )
    return Runtime(
        workspace, config=config, db_path=Path(dsn), approver=ApproveAll(), tools=list(tools)
    )


def terminate(base_dsn: str, pid: int) -> None:
    with psycopg.connect(base_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def audit(dsn: str, session_id: str) -> tuple[list[tuple[str, int, str, str | None]], list[str]]:
    """(call rows: id, attempt, status, outcome) and "kind call_id" of events, read afresh."""
    store = PostgresStore(dsn, migrate=False)
    try:
        rows = [(c.call_id, c.attempt, c.status, c.outcome) for c in store.calls(session_id)]
        events = [f"{e.kind} {e.call_id}" for e in store.events(session_id)]
    finally:
        store.close()
    return rows, events


def once_each(events: list[str]) -> bool:
    return len(events) == len(set(events)) or all(
        events.count(e) == 1 for e in events if not e.startswith(("dispatch.", "call.result"))
    )


# Isolation ---------------------------------------------------------------------


WRITER = textwrap.dedent(
    """
    import asyncio, json, os, sys, time
    from pathlib import Path
    from zuno.config.loading import Config
    from zuno.contract.events import Event
    from zuno.policy.approvals import ApproveAll
    from zuno.session.runtime import Runtime
    from zuno.durability.store.postgres import PostgresStore

    dsn, shared, rounds, go, workspace = sys.argv[1:6]
    errors = []
    store = PostgresStore(dsn)
    isolation = store.query("SHOW default_transaction_isolation")[0][0]
    rt = Runtime(Path(workspace), config=Config(), db_path=Path(dsn), approver=ApproveAll())
    session = rt.open_session()
    for _ in range(3000):  # start together (bounded: 30 s)
        if os.path.exists(go):
            break
        time.sleep(0.01)

    async def work(i):
        for op in (
            lambda: store.append_message(shared, "user", {"i": i, "pid": os.getpid()}),
            lambda: store.append_event(Event("test.tick", shared, data={"i": i})),
            lambda: store.create_session(f"ses_{os.getpid()}_{i}", "build", workspace),
        ):
            try:
                op()
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
        for tool, args in (
            ("todo_update", {"todos": [{"content": f"t{i}"}, {"content": "u"}]}),
            ("plan_update", {"plan": f"plan {i}"}),
        ):
            try:
                result = await rt.call(session, tool, args)
                if result.outcome.value != "ok":
                    errors.append(f"{tool}: {result.output}")
            except Exception as exc:
                errors.append(f"{tool} {type(exc).__name__}: {exc}")

    async def main():
        for i in range(int(rounds)):
            await work(i)

    asyncio.run(main())
    rt.close()
    store.close()
    print(json.dumps({"errors": errors, "isolation": isolation}))
    """
)


def test_a_repeatable_read_database_takes_eight_writers(
    pg_dsn: str, tmp_path: Path, workspace: Path
) -> None:
    # The database's default, set the way an administrator would (for this role's
    # connections through the connection string).
    dsn = pg_dsn.replace(
        "options=-csearch_path%3D",
        "options=-cdefault_transaction_isolation%3Drepeatable%5C%20read%20-csearch_path%3D",
    )
    seed = PostgresStore(dsn)
    seed.create_session("ses_shared", "build", str(workspace))
    seed.close()
    go = tmp_path / "go"
    rounds = 12
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, dsn, "ses_shared", str(rounds), str(go), str(workspace)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    go.write_text("go")
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert {r["isolation"] for r in reports} == {"repeatable read"}
    errors = [e for r in reports for e in r["errors"]]
    assert errors == []
    check = PostgresStore(dsn, migrate=False)
    numbers = [
        int(r[0])
        for r in check.query(
            "SELECT seq FROM messages WHERE session_id = 'ses_shared' ORDER BY seq"
        )
    ]
    check.close()
    assert numbers == list(range(1, 8 * rounds + 1))


# Dropped connections -------------------------------------------------------------


async def test_a_connection_killed_mid_call_leaves_the_worker_working(
    workspace: Path, pg_dsn: str
) -> None:
    gate = Gate()
    rt = make_runtime(workspace, pg_dsn, gate, Echo())
    store = rt.store
    assert isinstance(store, PostgresStore)
    session = rt.open_session()
    await rt.call(session, "echo", {"text": "before"})
    results = []

    async def call() -> None:
        results.append(await rt.call(session, "gate", {"text": "x"}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(60):
            await gate.entered.wait()
        terminate(pg_dsn, store.connection.info.backend_pid)
        gate.opened.set()
    (result,) = results
    assert result.outcome is Outcome.OK and gate.runs == 1
    # The worker keeps working on a new connection.
    later = await rt.call(session, "echo", {"text": "after"})
    assert later.outcome is Outcome.OK
    rows, events = audit(pg_dsn, session.session_id)
    mine = [r for r in rows if r[0] == result.call_id]
    assert mine == [(result.call_id, 1, "finished", "ok")]
    assert [r[2] for r in rows] == ["finished"] * 3
    assert events.count(f"call.finished {result.call_id}") == 1
    rt.close()


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_read_only_result_cut_at_its_commit_is_written_once(
    workspace: Path, pg_dsn: str, relay: Relay, when: str
) -> None:
    rt = make_runtime(workspace, through(pg_dsn, relay), Echo())
    session = rt.open_session()
    await rt.call(session, "echo", {"text": "warm"})
    # The next transaction after the call starts is its result's.
    rt.events.subscribe(lambda e: relay.cut(when) if e.kind == "call.started" else None)
    result = await rt.call(session, "echo", {"text": "cut"})
    assert relay.cuts == 1
    assert result.outcome is Outcome.OK
    later = await rt.call(session, "echo", {"text": "later"})
    assert later.outcome is Outcome.OK
    rows, events = audit(pg_dsn, session.session_id)
    assert sorted(r[0] for r in rows) == sorted({r[0] for r in rows})  # no row twice
    assert (result.call_id, 1, "finished", "ok") in rows
    assert (later.call_id, 1, "finished", "ok") in rows  # the worker kept working
    for kind in ("call.started", "call.finished"):
        assert events.count(f"{kind} {result.call_id}") == 1, events
    assert len(events) == len(set(events)) or once_each(events)
    rt.close()


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_started_row_cut_at_its_commit_never_runs_twice(
    workspace: Path, pg_dsn: str, relay: Relay, when: str
) -> None:
    rt = make_runtime(workspace, through(pg_dsn, relay), Append())
    session = rt.open_session()
    await rt.call(session, "append", {"text": "warm"})
    # The next transaction after the step opens is the call's started row.
    rt.events.subscribe(lambda e: relay.cut(when) if e.kind == "dispatch.started" else None)
    result = await rt.call(session, "append", {"text": "cut"})
    assert relay.cuts == 1
    runs = (workspace / "effects.txt").read_text().splitlines().count("cut")
    rows, events = audit(pg_dsn, session.session_id)
    mine = [r for r in rows if r[0] == result.call_id]
    assert runs <= 1
    if runs:
        assert result.outcome is Outcome.OK
        assert mine == [(result.call_id, 1, "finished", "ok")]
        assert events.count(f"call.started {result.call_id}") == 1
    else:
        # Not confirmed: not run, and no started row left behind.
        assert result.is_error and mine in ([], [(result.call_id, 1, "finished", "error")])
    # Cut before the server saw it, the row is written again; after, it is known landed.
    assert runs == 1
    later = await rt.call(session, "append", {"text": "later"})
    assert later.outcome is Outcome.OK
    assert (workspace / "effects.txt").read_text().splitlines().count("later") == 1
    rt.close()


async def test_an_unreachable_server_names_the_first_cause(
    workspace: Path, pg_dsn: str, relay: Relay
) -> None:
    gate = Gate()
    rt = make_runtime(workspace, through(pg_dsn, relay), gate, Echo())
    store = rt.store
    assert isinstance(store, PostgresStore)
    session = rt.open_session()
    results = []

    async def call() -> None:
        results.append(await rt.call(session, "gate", {"text": "x"}))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(60):
            await gate.entered.wait()
        relay.refuse = True  # the server cannot be reached again for now
        terminate(pg_dsn, store.connection.info.backend_pid)
        gate.opened.set()
    # It ran; its result waits in memory for the store.
    assert results[0].outcome is Outcome.OK
    with pytest.raises(StoreUnavailable) as caught:
        store.calls(session.session_id)
    text = str(caught.value)
    # libpq's words for the drop come first, then why reconnecting failed.
    assert "connection was lost (" in text and "attempts to connect failed" in text, text
    assert any(w in text for w in ("administrator command", "closed the connection")), text
    assert "ROLLBACK" not in text and "connection is closed" not in text
    with pytest.raises(StoreUnavailable):
        await rt.call(session, "echo", {"text": "not now"})
    relay.refuse = False
    # Reachable again: the result is written (once) and the worker goes on.
    assert (await rt.call(session, "echo", {"text": "again"})).outcome is Outcome.OK
    rows, events = audit(pg_dsn, session.session_id)
    assert [(r[2], r[3]) for r in rows] == [("finished", "ok")] * 2
    assert events.count(f"call.finished {results[0].call_id}") == 1
    assert gate.runs == 1
    rt.close()


def test_a_refused_queued_row_found_while_the_caller_reads_is_set_aside(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresStore(pg_dsn)
    store.create_session("s1", "build", "/w")
    store.append_events([Event("before", "s1")])
    # NOT NULL broken: the server refuses it, in the same pipeline as the caller's read.
    store._defer(  # pyright: ignore[reportPrivateUsage]
        "INSERT INTO steps (session_id, step, created_at) VALUES (?, ?, ?)", ("s1", 7, None)
    )
    store.append_events([Event("after", "s1")])
    seq = store.append_event(Event("mine", "s1"))
    assert [(e.seq, e.kind) for e in store.events("s1")][-1] == (seq, "mine")
    assert [e.kind for e in store.events("s1")] == ["before", "after", "mine"]
    assert "set aside" in caplog.text
    store.close()
