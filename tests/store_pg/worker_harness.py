"""Workers as separate processes, each in its own PID namespace, for the multi-process tests.

Run as a script, this module is one worker: it builds a real
:class:`zuno.session.runtime.Runtime` on the store named by ``--db`` (a
``postgresql://`` URL or a SQLite file) with one test tool, ``gate``, and
obeys JSON commands read from stdin, one per line, answering with JSON lines
on stdout::

    {"id": 1, "op": "whoami"}              -> pid, pid namespace, runner, worker id
    {"id": 2, "op": "open", "session": S}  -> the session opened (S None: a new one) or the error
    {"id": 3, "op": "call", "tag": T, ...} -> accepted now; later {"event": "result"|"raised", ...}
    {"id": 4, "op": "look", "session": S}  -> another worker looking at S: open it, settle it
    {"id": 5, "op": "notice", "session": S}-> the pending recovery notice
    {"id": 6, "op": "burst", "rounds": N}  -> N steps of three quick calls; outcome counts
    {"id": 7, "op": "close"}               -> closes the runtime and exits

``gate`` appends its tag to ``effects.log`` in the workspace when it is
side-effecting (Never, Exclusive), touches ``entered-TAG``, and with
``wait`` blocks until the file ``gate-TAG`` appears: a call the test holds
in flight for as long as it likes.

Imported, it gives the test side: :class:`Worker` starts one worker under
``unshare --pid --fork --mount-proc`` (a PID namespace of its own, so pids
say nothing about other workers, as between two hosts), sends commands,
pauses, continues and kills it by its real pid; :class:`StoreReader` judges
by reading the store directly; the ``scenario_*`` functions are the cases
both stores run.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

HARNESS = Path(__file__).resolve()
REPLY_TIMEOUT = 120.0
"""Seconds a worker may take to answer one command (a bound, never a measurement)."""
SETTLE_DEADLINE = 120.0
"""Seconds to wait for a lease to expire and another worker to act on it (a bound)."""


# ----------------------------------------------------------------------------------------------
# The worker (runs inside its own PID namespace)
# ----------------------------------------------------------------------------------------------


def _gate_tool(workspace: Path) -> Any:
    from pydantic import Field

    from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolError, ToolResult
    from zuno.core.declarations import Concurrency, Declaration, Effect, Replay

    class GateArgs(ToolArgs):
        tag: str = Field(min_length=1, max_length=60)
        effect: Literal["read_only", "side_effecting"] = "side_effecting"
        wait: bool = False

    class GateTool(Tool[GateArgs]):
        """Side-effecting (Never, Exclusive) or read-only (Safe); may wait for a file."""

        name: ClassVar[str] = "gate"
        description: ClassVar[str] = "Test tool: records an effect, may wait for a gate file."
        args_model = GateArgs
        mixed: ClassVar[bool] = True
        rule_argument: ClassVar[str | None] = "tag"

        def declare(self, args: GateArgs) -> Declaration:
            if args.effect == "read_only":
                return Declaration(Effect.READ_ONLY, Replay.SAFE, Concurrency.PARALLEL_SAFE)
            return Declaration(Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.EXCLUSIVE)

        async def run(self, args: GateArgs, ctx: ToolContext) -> ToolResult:
            import anyio

            if args.effect == "side_effecting":
                # One write(2) with O_APPEND: lines of several processes never interleave.
                fd = os.open(workspace / "effects.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                try:
                    os.write(fd, f"{args.tag}\n".encode())
                finally:
                    os.close(fd)
            (workspace / f"entered-{args.tag}").touch()
            if args.wait:
                gate = workspace / f"gate-{args.tag}"
                deadline = time.monotonic() + 600
                while not gate.exists():
                    if time.monotonic() > deadline:
                        raise ToolError(f"the gate {gate.name} never opened")
                    await anyio.sleep(0.02)
            return ToolResult(f"done {args.tag}", data={"tag": args.tag})

    class GateJobArgs(ToolArgs):
        tag: str = Field(min_length=1, max_length=60)

    class GateJobTool(Tool[GateJobArgs]):
        """Starts a background job that records an effect and waits for a gate file."""

        name: ClassVar[str] = "gatejob"
        description: ClassVar[str] = "Test tool: a background job that waits for a gate file."
        args_model = GateJobArgs
        declaration: ClassVar[Declaration] = Declaration(
            Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.ISOLATED_BACKGROUND
        )

        async def run(self, args: GateJobArgs, ctx: ToolContext) -> ToolResult:
            import anyio

            from zuno.session.jobs import JobEnd, JobIO

            async def body(io: JobIO) -> JobEnd:
                fd = os.open(workspace / "effects.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                try:
                    os.write(fd, f"job-{args.tag}\n".encode())
                finally:
                    os.close(fd)
                (workspace / f"entered-{args.tag}").touch()
                gate = workspace / f"gate-{args.tag}"
                deadline = time.monotonic() + 600
                while not gate.exists():
                    if time.monotonic() > deadline:
                        return JobEnd(1, detail=f"the gate {gate.name} never opened")
                    await anyio.sleep(0.02)
                return JobEnd(0)

            job = await ctx.services.jobs.start_for_call(
                ctx, kind="gate", description=args.tag, body=body
            )
            return ToolResult(f"started {job.job_id}", data={"job_id": job.job_id})

    return [GateTool(), GateJobTool()]


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]  # pyright: ignore
    return [exc]


def _error(exc: BaseException) -> dict[str, Any]:
    """The error by its type and message; a group by the errors inside it."""
    leaves = _leaves(exc)
    if len(leaves) == 1:
        exc = leaves[0]
    message = "; ".join(f"{type(e).__name__}: {e}" for e in leaves) if len(leaves) > 1 else str(exc)
    return {"ok": False, "error": type(exc).__name__, "message": message}


def _worker_id() -> str | None:
    try:
        from zuno.durability.workers import this_worker  # pyright: ignore
    except ImportError:
        return None
    return str(this_worker().id)  # pyright: ignore


class _Worker:
    def __init__(self, db: str, workspace: Path) -> None:
        from zuno.config.loading import Config
        from zuno.policy.approvals import ApproveAll
        from zuno.session.runtime import Runtime

        self.workspace = workspace
        self.rt = Runtime(
            workspace,
            config=Config(),
            db_path=Path(db),
            approver=ApproveAll(),
            tools=_gate_tool(workspace),
        )
        self.session: Any = None

    def emit(self, obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def whoami(self) -> dict[str, Any]:
        return {
            "ok": True,
            "pid": os.getpid(),
            "pidns": os.stat("/proc/self/ns/pid").st_ino,
            "runner": getattr(self.rt, "identity", None),
            "worker_id": _worker_id(),
        }

    def open(self, session: str | None) -> dict[str, Any]:
        try:
            self.session = self.rt.open_session(session)
        except Exception as exc:
            return _error(exc)
        return {"ok": True, "session": self.session.session_id}

    def look(self, session: str) -> dict[str, Any]:
        """What another worker does with a session: try to open it, then settle it."""
        from zuno.durability.recovery import settle_interrupted

        opened = self.open(session)
        try:
            settled: Any = settle_interrupted(self.rt.store, session)
        except Exception as exc:
            settled = _error(exc)
        return {"ok": True, "opened": opened, "settled": settled}

    def notice(self, session: str) -> dict[str, Any]:
        from zuno.durability.recovery import pending_notice

        notice = pending_notice(self.rt.store, session)
        return {"ok": True, "notice": None if notice is None else notice.as_dict()}

    def jobs_look(self, job_id: str) -> dict[str, Any]:
        """What another worker does with jobs: a new lane (as at start-up), a sweep, a read."""
        from zuno.session.jobs import JobLane

        lane = JobLane(self.rt.store, self.workspace / "lane")
        swept = lane.mark_lost()
        record = lane.get(job_id)
        return {"ok": True, "swept": swept, "state": None if record is None else str(record.state)}

    async def call(self, tag: str, effect: str, wait: bool, tool: str = "gate") -> None:
        args: dict[str, Any] = {"tag": tag}
        if tool == "gate":
            args.update(effect=effect, wait=wait)
        try:
            result = await self.rt.call(self.session, tool, args)
        except Exception as exc:
            self.emit({"event": "raised", "tag": tag, **_error(exc)})
            return
        self.emit(
            {
                "event": "result",
                "tag": tag,
                "call_id": result.call_id,
                "outcome": str(getattr(result.outcome, "value", result.outcome)),
                "output": result.output,
                "data": result.data,
            }
        )

    async def burst(self, rounds: int, prefix: str) -> dict[str, Any]:
        """Steps of two read-only calls and one side-effecting call, one after another."""
        from zuno.dispatch.dispatcher import CallRequest

        outcomes: dict[str, int] = {}
        errors: list[str] = []
        for i in range(rounds):
            requests = [
                CallRequest("gate", {"tag": f"{prefix}r{i}a", "effect": "read_only"}),
                CallRequest("gate", {"tag": f"{prefix}r{i}b", "effect": "read_only"}),
                CallRequest("gate", {"tag": f"{prefix}w{i}", "effect": "side_effecting"}),
            ]
            try:
                results = await self.rt.dispatch(self.session, requests)
            except Exception as exc:
                err = _error(exc)
                errors.append(f"{err['error']}: {err['message']}")
                continue
            for r in results:
                key = str(getattr(r.outcome, "value", r.outcome))
                outcomes[key] = outcomes.get(key, 0) + 1
                if key != "ok":
                    errors.append(f"{key}: {r.output[:300]}")
        return {"ok": True, "outcomes": outcomes, "errors": errors[:20]}


async def _serve(db: str, workspace: Path) -> None:
    import anyio

    worker = _Worker(db, workspace)
    worker.emit({"event": "ready", **worker.whoami()})
    async with worker.rt, anyio.create_task_group() as tg:
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                break
            cmd = json.loads(line)
            op = cmd.get("op")
            reply: dict[str, Any]
            try:
                if op == "whoami":
                    reply = worker.whoami()
                elif op == "open":
                    reply = worker.open(cmd.get("session"))
                elif op == "look":
                    reply = worker.look(cmd["session"])
                elif op == "jobs_look":
                    reply = worker.jobs_look(cmd["job"])
                elif op == "notice":
                    reply = worker.notice(cmd["session"])
                elif op == "call":
                    tg.start_soon(
                        worker.call,
                        cmd["tag"],
                        cmd.get("effect", "side_effecting"),
                        cmd.get("wait", False),
                        cmd.get("tool", "gate"),
                    )
                    reply = {"ok": True}
                elif op == "burst":
                    reply = await worker.burst(int(cmd["rounds"]), cmd.get("prefix", ""))
                elif op == "close":
                    worker.rt.close()
                    worker.emit({"reply": cmd.get("id"), "ok": True})
                    break
                else:
                    reply = {"ok": False, "error": "UnknownOp", "message": str(op)}
            except Exception as exc:
                reply = {**_error(exc), "traceback": traceback.format_exc()}
            worker.emit({"reply": cmd.get("id"), **reply})
        tg.cancel_scope.cancel()


def main(argv: Sequence[str]) -> None:
    import argparse

    import anyio

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", required=True)
    parser.add_argument("--workspace", required=True, type=Path)
    args = parser.parse_args(argv)
    # As the init of its PID namespace, the process gets only signals it handles;
    # SIGCONT from the test must reach it whatever the kernel does for init.
    signal.signal(signal.SIGCONT, lambda *_: None)
    anyio.run(_serve, args.db, args.workspace)
    sys.stdout.flush()
    # The lease heartbeat (a daemon thread) may be mid-query: leave without joining it.
    os._exit(0)


# ----------------------------------------------------------------------------------------------
# The test side
# ----------------------------------------------------------------------------------------------


def _probe(cmd: list[str]) -> bool:
    try:
        return subprocess.run([*cmd, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


_PREFIX: list[str] | None = None


def namespace_prefix() -> list[str] | None:
    """The command that runs a program as init of a new PID namespace (with its own /proc)."""
    global _PREFIX
    if _PREFIX is None:
        base = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
        for cmd in (base, ["unshare", "--user", "--map-root-user", *base[1:]]):
            if _probe(cmd):
                _PREFIX = cmd
                break
        else:
            _PREFIX = []
    return _PREFIX or None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return None


@dataclass
class Worker:
    """One worker process in its own PID namespace, driven over its stdin and stdout."""

    name: str
    db: str
    workspace: Path
    logs: Path
    env: dict[str, str]
    proc: subprocess.Popen[str] = field(init=False)
    pid: int = field(init=False)
    """The worker's pid as the test (in the parent namespace) sees it."""
    ready: dict[str, Any] = field(init=False)
    events: list[dict[str, Any]] = field(init=False, default_factory=lambda: [])
    _lines: queue.Queue[dict[str, Any] | None] = field(init=False, default_factory=queue.Queue)
    _next: int = field(init=False, default=0)

    def start(self) -> Worker:
        prefix = namespace_prefix()
        assert prefix is not None
        self.stderr_path = self.logs / f"worker-{self.name}.stderr"
        self._stderr = self.stderr_path.open("w")
        self.proc = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                str(HARNESS),
                "--db",
                self.db,
                "--workspace",
                str(self.workspace),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=self.env,
            cwd=self.workspace,
        )
        threading.Thread(target=self._read, daemon=True).start()
        self.ready = self._wait(lambda m: m.get("event") == "ready", "its start")
        children = _children(self.proc.pid)
        assert len(children) == 1, f"worker {self.name}: unshare has children {children}"
        self.pid = children[0]
        return self

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self._lines.put(json.loads(line))
            except json.JSONDecodeError:
                self._lines.put({"event": "noise", "line": line})
        self._lines.put(None)

    def diagnostics(self) -> str:
        self._stderr.flush()
        tail = self.stderr_path.read_text(errors="replace")[-3000:]
        return (
            f"worker {self.name} (pid {self.pid if hasattr(self, 'pid') else '?'}) stderr:\n{tail}"
        )

    def _wait(self, match: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        for i, msg in enumerate(self.events):
            if match(msg):
                return self.events.pop(i)
        deadline = time.monotonic() + REPLY_TIMEOUT
        while True:
            left = deadline - time.monotonic()
            try:
                msg = self._lines.get(timeout=max(left, 0.01))
            except queue.Empty:
                raise AssertionError(
                    f"worker {self.name} gave no answer for {what} within {REPLY_TIMEOUT:.0f} s\n"
                    + self.diagnostics()
                ) from None
            if msg is None:
                self._lines.put(None)
                raise AssertionError(
                    f"worker {self.name} exited (status {self.proc.poll()}) before {what}\n"
                    + self.diagnostics()
                )
            if match(msg):
                return msg
            self.events.append(msg)

    def send(self, op: str, **kw: Any) -> int:
        """Send a command without waiting; :meth:`reply` collects its answer."""
        self._next += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": self._next, "op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        return self._next

    def reply(self, ident: int, what: str = "a command") -> dict[str, Any]:
        answer = self._wait(lambda m: m.get("reply") == ident, what)
        if "traceback" in answer:
            raise AssertionError(f"worker {self.name}: {what} failed:\n{answer['traceback']}")
        return answer

    def request(self, op: str, **kw: Any) -> dict[str, Any]:
        return self.reply(self.send(op, **kw), f"{op} {kw}")

    def open(self, session: str | None = None) -> str:
        reply = self.request("open", session=session)
        assert reply["ok"], f"worker {self.name} could not open {session}: {reply}"
        return str(reply["session"])

    def call(self, tag: str, *, effect: str = "side_effecting", wait: bool = False) -> None:
        self.request("call", tag=tag, effect=effect, wait=wait)

    def outcome(self, tag: str) -> dict[str, Any]:
        """The call's answer in this worker: a result, or the exception it raised."""
        return self._wait(
            lambda m: m.get("event") in ("result", "raised") and m.get("tag") == tag,
            f"the result of call {tag}",
        )

    def whoami(self) -> dict[str, Any]:
        return self.request("whoami")

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        _until(lambda: _state(self.pid) == "T", f"worker {self.name} to stop")

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        _until(lambda: _state(self.pid) != "T", f"worker {self.name} to continue")

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=REPLY_TIMEOUT)

    def close(self) -> None:
        if self.proc.poll() is None:
            with suppress(AssertionError, OSError, ValueError):
                self.request("close")
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)

    def destroy(self) -> None:
        """End the worker whatever its state (stopped, blocked); only this worker's processes."""
        if self.proc.poll() is None:
            with suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with suppress(ProcessLookupError):
                self.proc.kill()
            with suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        self._stderr.close()


def _until(check: Callable[[], bool], what: str, deadline: float = REPLY_TIMEOUT) -> None:
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what} after {deadline:.0f} s")
        time.sleep(0.02)


class StoreReader:
    """Reads the store directly (its own connection), to judge by rows, not by a worker's words."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.pg = db.startswith(("postgresql://", "postgres://"))
        if self.pg:
            import psycopg

            self._pg = psycopg.connect(db, autocommit=True)
        else:
            self._lite_conn: sqlite3.Connection | None = None  # opened once a worker made the file

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.pg:
            return self._pg.execute(sql.replace("?", "%s"), params).fetchall()  # pyright: ignore
        if self._lite_conn is None:
            self._lite_conn = sqlite3.connect(self.db, timeout=30, isolation_level=None)
        return self._lite_conn.execute(sql, params).fetchall()

    def now(self) -> float:
        """The store's clock (PostgreSQL's, or the machine's for SQLite): ``zuno_now()``."""
        if self.pg:
            (row,) = self.rows("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8")
            return float(row[0])
        return time.time()

    def has_table(self, name: str) -> bool:
        if self.pg:
            return bool(self.rows("SELECT to_regclass(?) IS NOT NULL", (name,))[0][0])
        return bool(self.rows("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)))

    def lease_expiry(self, worker_id: str | None) -> float | None:
        """When the worker's lease ends by the store's clock; None: no lease is recorded."""
        if worker_id is None or not self.has_table("workers"):
            return None
        rows = self.rows("SELECT expires_at FROM workers WHERE worker_id = ?", (worker_id,))
        return float(rows[0][0]) if rows and rows[0][0] is not None else None

    def calls(self, session: str) -> list[dict[str, Any]]:
        names = ("call_id", "tool", "arguments", "attempt", "status", "outcome", "result", "step")
        rows = self.rows(
            f"SELECT {', '.join(names)} FROM calls WHERE session_id = ?"
            " ORDER BY step, idx, attempt",
            (session,),
        )
        return [dict(zip(names, r, strict=True)) for r in rows]

    def call_with_time(self, call_id: str) -> tuple[str, str | None, str | None, float]:
        """A call's status, outcome and result, and the store's clock, read in one statement."""
        if self.pg:
            sql = (
                "SELECT status, outcome, result, EXTRACT(EPOCH FROM clock_timestamp())::float8"
                " FROM calls WHERE call_id = ?"
            )
            (row,) = self.rows(sql, (call_id,))
            return row[0], row[1], row[2], float(row[3])
        (row,) = self.rows(
            "SELECT status, outcome, result FROM calls WHERE call_id = ?", (call_id,)
        )
        return row[0], row[1], row[2], time.time()

    def events(self, call_id: str) -> list[tuple[str, dict[str, Any]]]:
        rows = self.rows("SELECT kind, data FROM events WHERE call_id = ? ORDER BY seq", (call_id,))
        return [(k, json.loads(d) if d else {}) for k, d in rows]

    def holds_a_transaction(self, worker: Worker, app_name: str | None) -> bool:
        """Whether a stopped worker was caught inside a write transaction (it then blocks others).

        A process stopped in the middle of a transaction holds its locks until it
        continues, by design of both engines; the cases here are about a worker
        paused while a tool runs, so the test re-pauses until the stop lands outside.
        """
        if self.pg:
            rows = self.rows(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = ?"
                " AND state <> 'idle'",
                (app_name,),
            )
            return int(rows[0][0]) > 0
        probe = sqlite3.connect(self.db, timeout=0, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            probe.close()

    def close(self) -> None:
        if self.pg:
            self._pg.close()
        elif self._lite_conn is not None:
            self._lite_conn.close()


# ----------------------------------------------------------------------------------------------
# The cases (each test file runs them on its store)
# ----------------------------------------------------------------------------------------------


@dataclass
class Cluster:
    """Workers on one store, each in its own PID namespace, and a reader of that store."""

    db: str
    workspace: Path
    logs: Path
    env: dict[str, str]
    url_for: Callable[[str], str]
    """The store location a worker of this name uses (PostgreSQL: its own application_name)."""
    reader: StoreReader = field(init=False)
    workers: list[Worker] = field(init=False, default_factory=lambda: [])

    def __post_init__(self) -> None:
        self.reader = StoreReader(self.db)

    def spawn(self, name: str, lease_seconds: float = 2) -> Worker:
        env = {**self.env, "ZUNO_LEASE_SECONDS": str(lease_seconds)}
        worker = Worker(name, self.url_for(name), self.workspace, self.logs, env)
        self.workers.append(worker)
        return worker.start()

    def app_name(self, worker: Worker) -> str | None:
        return app_name(worker.name) if self.reader.pg else None

    def pause_outside_transactions(self, worker: Worker) -> None:
        """SIGSTOP the worker at a moment it holds no open transaction (bounded retries)."""
        for _ in range(50):
            worker.pause()
            if not self.reader.holds_a_transaction(worker, self.app_name(worker)):
                return
            worker.resume()
            time.sleep(0.05)
        raise AssertionError(
            f"worker {worker.name} was inside a store transaction at each of 50 pauses: "
            "it keeps a transaction open while a tool runs, so a paused worker blocks every other"
        )

    def effects(self) -> list[str]:
        path = self.workspace / "effects.log"
        return path.read_text().split() if path.exists() else []

    def wait_entered(self, tag: str) -> None:
        _until(lambda: (self.workspace / f"entered-{tag}").exists(), f"call {tag} to start")

    def open_gate(self, tag: str) -> None:
        (self.workspace / f"gate-{tag}").touch()

    def close(self) -> None:
        for worker in self.workers:
            worker.destroy()
        self.reader.close()


def app_name(worker: str) -> str:
    return f"zuno-mp-{os.getpid()}-{worker}"


@contextmanager
def cluster(
    db: str, tmp: Path, env: dict[str, str], url_for: Callable[[str], str] | None = None
) -> Iterator[Cluster]:
    workspace = tmp / "ws"
    workspace.mkdir(exist_ok=True)
    logs = tmp / "logs"
    logs.mkdir(exist_ok=True)
    c = Cluster(db, workspace, logs, env, url_for or (lambda _name: db))
    try:
        yield c
    finally:
        c.close()


def running_call(c: Cluster, owner: Worker, session: str, tag: str) -> str:
    """Start a side-effecting (Never) call in ``owner`` that blocks; its call id once it runs."""
    owner.call(tag, wait=True)
    c.wait_entered(tag)
    rows = [r for r in c.reader.calls(session) if json.loads(r["arguments"]).get("tag") == tag]
    assert len(rows) == 1, rows
    assert rows[0]["status"] == "started", rows
    return str(rows[0]["call_id"])


@dataclass
class Watch:
    looks_in_lease: int = 0
    answers: list[dict[str, Any]] = field(default_factory=lambda: [])
    final: tuple[str, str | None, str | None] | None = None


def watch_until_settled(
    c: Cluster, observer: Worker, session: str, call_id: str, expires: float | None
) -> Watch:
    """``observer`` looks at the session again and again until the call is settled.

    Every look that ended (by the store's clock) before the owner's lease
    expires must leave the call ``started``: the owner is alive (paused) or,
    from another PID namespace, cannot be known dead. ``expires`` None (no
    lease recorded) counts every look as inside the lease.
    """
    watch = Watch()
    deadline = time.monotonic() + SETTLE_DEADLINE
    while time.monotonic() < deadline:
        answer = observer.request("look", session=session)
        watch.answers.append(answer)
        status, outcome, result, now = c.reader.call_with_time(call_id)
        if expires is None or now < expires:
            assert status == "started", (
                f"worker {observer.name} settled call {call_id} ({outcome}) while its owner's "
                f"lease was valid (look {len(watch.answers)}, store clock {now:.3f}, lease "
                f"{'not recorded' if expires is None else f'until {expires:.3f}'}); "
                f"the look answered {answer}"
            )
            watch.looks_in_lease += 1
        elif status != "started":
            watch.final = (status, outcome, result)
            return watch
        time.sleep(0.05)
    raise AssertionError(
        f"call {call_id} was still started {SETTLE_DEADLINE:.0f} s after the owner was stopped "
        f"(lease until {expires}); last look: {watch.answers[-1:]}"
    )


def _lease_of(c: Cluster, worker: Worker) -> float | None:
    return c.reader.lease_expiry(worker.ready.get("worker_id"))


def stop_and_read_lease(c: Cluster, worker: Worker, how: Literal["pause", "kill"]) -> float | None:
    """Pause or kill the worker; when its lease ends (None: no lease is recorded).

    Read before and after: the row of a worker that can no longer renew it may
    be pruned once expired, and the later reading is the later end.
    """
    before = _lease_of(c, worker)
    if how == "pause":
        c.pause_outside_transactions(worker)
    else:
        worker.kill()
    after = _lease_of(c, worker)
    found = [t for t in (before, after) if t is not None]
    return max(found) if found else None


def scenario_paused_owner(c: Cluster) -> None:
    """A SIGSTOPped owner keeps its call until its lease expires; then another worker settles it."""
    owner = c.spawn("owner", lease_seconds=3)
    observer = c.spawn("observer", lease_seconds=3)
    session = owner.open()
    call_id = running_call(c, owner, session, "held")
    expires = stop_and_read_lease(c, owner, "pause")
    watch = watch_until_settled(c, observer, session, call_id, expires)
    assert watch.looks_in_lease >= 2, watch
    assert watch.final is not None and watch.final[:2] == ("finished", "uncertain"), watch.final
    assert c.effects() == ["held"]


def scenario_killed_owner(c: Cluster) -> None:
    """A SIGKILLed owner's Never call is settled after its lease: uncertain, named, never re-run."""
    owner = c.spawn("owner")
    observer = c.spawn("observer")
    session = owner.open()
    call_id = running_call(c, owner, session, "lost")
    expires = stop_and_read_lease(c, owner, "kill")
    watch = watch_until_settled(c, observer, session, call_id, expires)
    assert watch.final is not None and watch.final[:2] == ("finished", "uncertain"), watch.final
    # The observer took the session over once the lease had expired.
    _until(lambda: observer.request("open", session=session)["ok"], "the observer to take over")
    notice = observer.request("notice", session=session)["notice"]
    assert notice is not None, "no recovery notice after the owner was killed"
    assert [i["call_id"] for i in notice["items"]] == [call_id], notice
    assert call_id in notice["text"]
    # Nothing ran it again: opening the gate now would let a re-run finish.
    c.open_gate("lost")
    observer.call("after", effect="read_only")
    assert observer.outcome("after").get("outcome") == "ok"
    rows = [r for r in c.reader.calls(session) if r["call_id"] == call_id]
    assert [(r["attempt"], r["status"], r["outcome"]) for r in rows] == [
        (1, "finished", "uncertain")
    ], rows
    assert c.effects() == ["lost"]


def scenario_late_result(
    c: Cluster, before_resume: Callable[[Worker], object] | None = None
) -> None:
    """The paused owner, continued after another worker settled its call, never overwrites it.

    ``before_resume`` acts on the paused owner just before it continues (cuts its
    connections, say).
    """
    owner = c.spawn("owner")
    observer = c.spawn("observer")
    session = owner.open()
    call_id = running_call(c, owner, session, "late")
    expires = stop_and_read_lease(c, owner, "pause")
    watch = watch_until_settled(c, observer, session, call_id, expires)
    assert watch.final is not None
    settled = watch.final
    assert settled[:2] == ("finished", "uncertain"), settled
    c.open_gate("late")
    if before_resume is not None:
        before_resume(owner)
    owner.resume()
    answer = owner.outcome("late")
    # The owner has finished the call (whatever it tells its caller) ...
    status, outcome, result, _ = c.reader.call_with_time(call_id)
    assert (status, outcome, result) == settled, (
        f"the late result overwrote the settled row: {settled} became {(status, outcome, result)}"
        f"; the owner answered {answer}"
    )
    # ... and lost the session: its next call is refused and runs nothing.
    owner.call("after")
    after = owner.outcome("after")
    assert after.get("error") == "SessionBusy", after
    # Whatever the owner still holds back (records written with a later transaction) is
    # written by its close: judge the event log after it.
    owner.close()
    status, outcome, result, _ = c.reader.call_with_time(call_id)
    assert (status, outcome, result) == settled, (status, outcome, result)
    events = c.reader.events(call_id)
    late = [data for kind, data in events if kind == "call.late_result"]
    assert len(late) == 1, f"expected one call.late_result event, got {events}"
    assert late[0].get("outcome") == "ok", late
    claims = [data for kind, data in events if kind == "call.result"]
    assert all(d.get("outcome") in (None, "uncertain") for d in claims), (
        f"a call.result event contradicts the settled row: {events}"
    )
    assert c.effects() == ["late"]


def scenario_second_process(c: Cluster) -> None:
    """A second worker is refused a leased session, takes it over after expiry; the old owner
    then runs nothing in it."""
    # A long lease for the owner: a starved heartbeat on a loaded machine must not let go early.
    owner = c.spawn("owner", lease_seconds=5)
    second = c.spawn("second")
    session = owner.open()
    owner.call("first")
    assert owner.outcome("first").get("outcome") == "ok"
    refused = second.request("open", session=session)
    assert not refused["ok"], f"a second worker opened a session another worker holds: {refused}"
    assert refused["error"] == "SessionBusy", refused
    message = refused["message"]
    # It names the holder (host and pid in its namespace) and what to do.
    assert "--wait" in message and "try again" in message, message
    assert f"pid {owner.ready['pid']}" in message and socket.gethostname() in message, message
    # The owner stops heartbeating (paused): after its lease, the second worker takes over.
    expires = stop_and_read_lease(c, owner, "pause")
    assert expires is not None, "the owner has no lease row"
    deadline = time.monotonic() + SETTLE_DEADLINE
    while True:
        answer = second.request("open", session=session)
        now = c.reader.now()
        if answer["ok"]:
            break
        assert answer["error"] == "SessionBusy", answer
        assert time.monotonic() < deadline, f"never took over; last answer {answer}"
        time.sleep(0.05)
    assert now >= expires, f"took the session at {now:.3f}, before the lease end {expires:.3f}"
    second.call("second")
    assert second.outcome("second").get("outcome") == "ok"
    # The old owner continues: it lost the session, so it must not act in it.
    owner.resume()
    owner.call("stale")
    stale = owner.outcome("stale")
    assert stale.get("event") == "raised" and stale.get("error") == "SessionBusy", stale
    assert c.effects() == ["first", "second"], c.effects()
    tags = [json.loads(r["arguments"])["tag"] for r in c.reader.calls(session)]
    assert "stale" not in tags, tags
    second.call("third")
    assert second.outcome("third").get("outcome") == "ok"


def scenario_many_writers(c: Cluster, workers: int = 3, rounds: int = 15) -> None:
    """Several processes write at once (each its own session), then one hands its session over."""
    crew = [c.spawn(f"w{i}", lease_seconds=5) for i in range(workers)]
    sessions = [w.open() for w in crew]
    ids = [w.send("burst", rounds=rounds, prefix=f"w{i}") for i, w in enumerate(crew)]
    for w, ident in zip(crew, ids, strict=True):
        reply = w.reply(ident, "its burst")
        assert reply["ok"] and not reply["errors"], f"worker {w.name}: {reply}"
        assert reply["outcomes"] == {"ok": rounds * 3}, reply
    # Hand-over: the first worker closes, the second continues its session.
    crew[0].close()
    assert crew[1].open(sessions[0]) == sessions[0]
    reply = crew[1].request("burst", rounds=3, prefix="h")
    assert reply["ok"] and not reply["errors"], reply
    for s, extra in zip(sessions, [3, 0, 0], strict=False):
        rows = c.reader.calls(s)
        assert len(rows) == (rounds + extra) * 3, (s, len(rows))
        assert {(r["status"], r["outcome"]) for r in rows} == {("finished", "ok")}
        steps = sorted({r["step"] for r in rows})
        assert len(steps) == rounds + extra, steps
    assert sorted(c.effects()) == sorted(
        [f"w{i}w{n}" for i in range(workers) for n in range(rounds)] + [f"hw{n}" for n in range(3)]
    )


def scenario_paused_job_owner(c: Cluster) -> None:
    """A paused worker's background job is not lost before its lease expires; its late end
    goes beside the ``lost`` row."""
    owner = c.spawn("owner", lease_seconds=3)
    observer = c.spawn("observer", lease_seconds=3)
    owner.open()
    owner.request("call", tag="bg", tool="gatejob")
    started = owner.outcome("bg")
    assert started.get("outcome") == "ok", started
    job_id = started["data"]["job_id"]
    c.wait_entered("bg")
    expires = stop_and_read_lease(c, owner, "pause")
    looks_in_lease = 0
    deadline = time.monotonic() + SETTLE_DEADLINE
    while True:
        assert time.monotonic() < deadline, f"job {job_id} was never marked lost"
        answer = observer.request("jobs_look", job=job_id)
        (state,) = c.reader.rows("SELECT state FROM jobs WHERE job_id = ?", (job_id,))[0]
        now = c.reader.now()
        if expires is None or now < expires:
            assert state == "running", (
                f"worker {observer.name} marked the job of a paused worker {state} while that "
                f"worker's lease was valid (store clock {now:.3f}, lease "
                f"{'not recorded' if expires is None else f'until {expires:.3f}'}): {answer}"
            )
            looks_in_lease += 1
        elif state != "running":
            break
        time.sleep(0.05)
    assert state == "lost" and looks_in_lease >= 2, (state, looks_in_lease)
    c.open_gate("bg")
    owner.resume()

    def late() -> list[dict[str, Any]]:
        rows = c.reader.rows("SELECT data FROM events WHERE kind = 'job.late_result'")
        return [d for d in (json.loads(r[0]) for r in rows) if d.get("job_id") == job_id]

    _until(lambda: bool(late()), f"the late end of job {job_id} to be recorded")
    assert late()[0].get("state") == "succeeded", late()
    assert c.reader.rows("SELECT state FROM jobs WHERE job_id = ?", (job_id,)) == [("lost",)]
    assert c.effects() == ["job-bg"]


def scenario_ping_pong(c: Cluster) -> None:
    """A session goes from one worker to another and back: step numbers never clash."""
    first = c.spawn("first")
    second = c.spawn("second")
    session = first.open()
    assert first.request("burst", rounds=2, prefix="a")["outcomes"] == {"ok": 6}
    # The first stops renewing; after its lease the second takes over and writes steps.
    stop_and_read_lease(c, first, "pause")
    deadline = time.monotonic() + SETTLE_DEADLINE
    while not second.request("open", session=session)["ok"]:
        assert time.monotonic() < deadline, "the second worker never took over"
        time.sleep(0.05)
    assert second.request("burst", rounds=2, prefix="b")["outcomes"] == {"ok": 6}
    second.close()  # releases the session
    # The first continues: it opens the session again and writes after the second's steps.
    first.resume()
    assert first.open(session) == session
    again = first.request("burst", rounds=2, prefix="c")
    assert again["outcomes"] == {"ok": 6} and not again["errors"], again
    rows = c.reader.calls(session)
    assert len(rows) == 18, rows
    assert {(r["status"], r["outcome"]) for r in rows} == {("finished", "ok")}
    steps = [r["step"] for r in rows]
    assert len(set(steps)) == 6, steps
    tags_by_step = {}
    for r in rows:
        tags_by_step.setdefault(r["step"], set()).add(json.loads(r["arguments"])["tag"][0])
    assert all(len(t) == 1 for t in tags_by_step.values()), f"steps shared: {tags_by_step}"
    assert sorted(c.effects()) == sorted(f"{p}w{i}" for p in "abc" for i in range(2))


def scenario_takeover_race(c: Cluster, racers: int = 3) -> None:
    """Several workers race for a killed owner's session: one wins, the call is settled once."""
    owner = c.spawn("owner")
    crew = [c.spawn(f"racer{i}", lease_seconds=5) for i in range(racers)]
    session = owner.open()
    call_id = running_call(c, owner, session, "orphan")
    owner.kill()
    winners: list[str] = []
    problems: list[str] = []
    deadline = time.monotonic() + SETTLE_DEADLINE
    while not winners:
        assert time.monotonic() < deadline, "nobody took over the orphaned session"
        # All look at once, so their transactions overlap.
        pending = [(w, w.send("look", session=session)) for w in crew]
        for w, ident in pending:
            answer = w.reply(ident, "a look")
            opened, settled = answer["opened"], answer["settled"]
            if opened["ok"]:
                winners.append(w.name)
            elif opened["error"] != "SessionBusy":
                problems.append(f"{w.name} open: {opened}")
            if isinstance(settled, dict):
                problems.append(f"{w.name} settle: {settled}")
        time.sleep(0.02)
    assert not problems, problems
    assert len(winners) == 1, f"several workers took the session at once: {winners}"
    # The losers keep being refused while the winner holds it.
    for w in crew:
        if w.name not in winners:
            answer = w.request("open", session=session)
            assert not answer["ok"] and answer["error"] == "SessionBusy", answer
    kinds = [kind for kind, _ in c.reader.events(call_id)]
    assert kinds.count("call.interrupted") == 1, kinds
    status, outcome, _, _ = c.reader.call_with_time(call_id)
    assert (status, outcome) == ("finished", "uncertain")
    (winner,) = [w for w in crew if w.name in winners]
    winner.call("after", effect="read_only")
    assert winner.outcome("after").get("outcome") == "ok"
    assert c.effects() == ["orphan"]


if __name__ == "__main__":
    main(sys.argv[1:])
