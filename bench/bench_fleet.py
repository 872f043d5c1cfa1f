"""Fleet worker throughput: queued sessions of one-``read`` steps, 1, 2 and 4 workers.

Run:
    .venv/bin/python bench/bench_fleet.py                       # SQLite, and PostgreSQL when found
    .venv/bin/python bench/bench_fleet.py --db postgresql://root@/zuno_test
    .venv/bin/python bench/bench_fleet.py --sessions 50 --steps 10 --workers 1,2,4

A scripted Chat Completions server runs on 127.0.0.1 in a process of its own
(a small asyncio server, streamed replies): every session's model asks for
``--steps`` ``read`` calls of one small file, one call per step, then answers.
The script of a session is decided by its conversation alone (the number of
tool results so far), so any worker may send any request.

For each store and each number of workers: ``--sessions`` sessions are queued,
the ``zuno worker`` processes (started beforehand, idle) take them, and the run
ends when every session is done. Printed per run:

- calls/s: read calls of the run over the time from the first claim to the last
  session's end, both as the store recorded them;
- worker CPU per call: the workers' user + system time over the run
  (``/proc/PID/stat``, read while they idle before and after), per call;
- backend CPU per call (PostgreSQL): the same for the server processes serving
  the workers' connections (found in ``pg_stat_activity`` by the
  ``application_name`` the bench gives the workers);
- calls per busy worker core: calls/s per CPU-second the workers used.

The PostgreSQL run uses a schema made for it and dropped after. ``--profile
FILE`` runs one worker in this process on SQLite instead, after a warm-up, and
writes its profile: cProfile's stats for ``FILE.prof``, else pyinstrument's text
(``pip install pyinstrument``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Generator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_TICK = os.sysconf("SC_CLK_TCK")
_STEPS_DEFAULT = 10
_APP = "zuno-bench-fleet"

# The scripted model ------------------------------------------------------------------


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _reply(steps: int, body: dict[str, Any]) -> bytes:
    """The streamed reply to one request: a ``read`` call until ``steps`` results, then text."""
    messages: list[dict[str, Any]] = body.get("messages") or []
    done = sum(1 for m in messages if m.get("role") == "tool")
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0}
    head["model"] = body.get("model", "bench")
    if done < steps:
        call = {
            "index": 0,
            "id": f"call_{done + 1}",
            "type": "function",
            "function": {"name": "read", "arguments": '{"path": "notes.txt"}'},
        }
        delta: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
    else:
        delta = {"role": "assistant", "content": "Read it ten times; done."}
        finish = "stop"
    usage = {"prompt_tokens": 100 + 20 * done, "completion_tokens": 10, "total_tokens": 0}
    return b"".join(
        [
            _sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
            _sse({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
            _sse({**head, "choices": [], "usage": usage}),
            b"data: [DONE]\n\n",
        ]
    )


async def _serve_connection(
    steps: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            match = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
            body = await reader.readexactly(int(match.group(1)) if match else 0)
            out = _reply(steps, json.loads(body))
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"content-length: " + str(len(out)).encode() + b"\r\n\r\n" + out
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _model_server(steps: int) -> None:
    server = await asyncio.start_server(lambda r, w: _serve_connection(steps, r, w), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    async with server:
        await server.serve_forever()


@contextmanager
def model_server(steps: int) -> Generator[str]:
    """The scripted model in a process of its own; yields its OpenAI base URL."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-model", str(steps)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# CPU time of processes -----------------------------------------------------------------


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


@dataclass
class Backends:
    """CPU of the PostgreSQL server processes serving the workers (by application_name)."""

    dsn: str
    tag: str
    first: dict[int, float]
    last: dict[int, float]

    @classmethod
    def start(cls, dsn: str, tag: str) -> Backends:
        backends = cls(dsn, tag, {}, {})
        backends.sample()
        backends.first = dict(backends.last)
        return backends

    def sample(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            pids = [
                int(row[0])
                for row in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (self.tag,)
                )
            ]
        for pid in pids:
            cpu = cpu_seconds(pid)
            if cpu is not None:
                self.last[pid] = cpu

    def used(self) -> float:
        return sum(cpu - self.first.get(pid, 0.0) for pid, cpu in self.last.items())


# One run ------------------------------------------------------------------------------


@dataclass
class RunResult:
    workers: int
    calls: int
    wall: float
    worker_cpu: float
    backend_cpu: float | None

    @property
    def rate(self) -> float:
        return self.calls / self.wall

    def row(self, base: RunResult | None) -> str:
        per_call = self.worker_cpu / self.calls * 1000
        backend = "-" if self.backend_cpu is None else f"{self.backend_cpu / self.calls * 1000:.2f}"
        per_core = self.calls / self.worker_cpu
        scale = "-" if base is None else f"{self.rate / base.rate:.2f} x"
        return (
            f"| {self.workers} | {self.rate:,.0f} | {scale} | {per_call:.2f} | {backend} "
            f"| {per_core:,.0f} |"
        )


def _workspace(root: Path) -> Path:
    ws = root / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "notes.txt").write_text("".join(f"line {i}: some notes to read\n" for i in range(40)))
    return ws


def _env(root: Path, db: str, base_url: str) -> dict[str, str]:
    home = root / "home"
    home.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "ZUNO_DB": db,
        "ZUNO_ARTIFACTS": str(root / "artifacts"),
        "OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "sk-bench",
    }
    env.pop("ZUNO_CHECKPOINTS", None)
    return env


def _start_workers(n: int, env: dict[str, str], logs: Path) -> list[subprocess.Popen[bytes]]:
    procs: list[subprocess.Popen[bytes]] = []
    for i in range(n):
        log = (logs / f"worker{i}.log").open("wb")
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "zuno", "worker", "--lease", "30"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=logs,
            )
        )
    deadline = time.monotonic() + 120
    for i in range(n):
        while b") started" not in (logs / f"worker{i}.log").read_bytes():
            if procs[i].poll() is not None or time.monotonic() > deadline:
                raise SystemExit((logs / f"worker{i}.log").read_text())
            time.sleep(0.05)
    time.sleep(0.3)  # past the first empty look at the queue
    return procs


def run_once(
    db: str, base_url: str, workers: int, sessions: int, root: Path, pg_admin: str | None
) -> RunResult:
    from zuno.durability.store import open_store
    from zuno.fleet.worker import submit

    ws = _workspace(root)
    logs = root / f"logs-{workers}"
    logs.mkdir()
    env = _env(root, db, base_url)
    procs = _start_workers(workers, env, logs)
    try:
        backends = Backends.start(pg_admin, _APP) if pg_admin else None
        before = [cpu_seconds(p.pid) or 0.0 for p in procs]
        store = open_store(db)
        try:
            ids = [
                submit(store, f"bench task {i}", workspace=ws, agent="build", model="openai:bench")
                for i in range(sessions)
            ]
            marks = ",".join("?" for _ in ids)
            deadline = time.monotonic() + 600
            while True:
                (left,) = store.query(
                    f"SELECT count(*) FROM sessions WHERE session_id IN ({marks})"
                    " AND state NOT IN ('done', 'failed')",
                    tuple(ids),
                )[0]
                if backends is not None:
                    backends.sample()
                if not left:
                    break
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    raise SystemExit(f"the run did not finish; logs in {logs}")
                time.sleep(0.1)
            after = [cpu_seconds(p.pid) or 0.0 for p in procs]
            failed = store.query(
                f"SELECT count(*) FROM sessions WHERE session_id IN ({marks}) AND state = 'failed'",
                tuple(ids),
            )[0][0]
            if failed:
                raise SystemExit(f"{failed} session(s) failed; logs in {logs}")
            calls = store.query(
                f"SELECT count(*) FROM calls WHERE session_id IN ({marks})", tuple(ids)
            )[0][0]
            first = store.query(
                "SELECT min(at) FROM events WHERE kind = 'fleet.claimed'"
                f" AND session_id IN ({marks})",
                tuple(ids),
            )[0][0]
            last = store.query(
                "SELECT max(at) FROM events WHERE kind = 'fleet.finished'"
                f" AND session_id IN ({marks})",
                tuple(ids),
            )[0][0]
        finally:
            store.close()
    finally:
        for p in procs:
            with suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    return RunResult(
        workers,
        int(calls),
        float(last) - float(first),
        sum(a - b for a, b in zip(after, before, strict=True)),
        backends.used() if backends is not None else None,
    )


@contextmanager
def scratch_schema(dsn: str) -> Generator[str]:
    """A schema of its own for the run (dropped after); yields the workers' DSN."""
    import psycopg
    from psycopg import sql

    schema = f"zuno_bench_fleet_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    sep = "&" if "?" in dsn else "?"
    try:
        yield f"{dsn}{sep}options=-csearch_path%3D{schema}&application_name={_APP}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _default_pg() -> str | None:
    found = os.environ.get("ZUNO_TEST_POSTGRES")
    if found:
        return found
    with suppress(OSError):
        return (ROOT / ".venv" / "zuno-test-postgres").read_text().split()[-1]
    return None


def table(label: str, results: list[RunResult]) -> None:
    print(f"\n{label}\n")
    print(
        "| workers | calls/s | vs 1 worker | worker CPU-ms/call | backend CPU-ms/call "
        "| calls per worker CPU-second |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    base = results[0] if results and results[0].workers == 1 else None
    for r in results:
        print(r.row(None if r is base else base))


def profile_one(sessions: int, steps: int, out: Path) -> None:
    """One worker in this process under cProfile, on SQLite."""
    import cProfile

    from zuno.durability.store import open_store
    from zuno.durability.workers import shared_lease
    from zuno.fleet.worker import FleetWorker, submit

    with tempfile.TemporaryDirectory() as tmp, model_server(steps) as url:
        root = Path(tmp)
        ws = _workspace(root)
        env = _env(root, str(root / "fleet.db"), url)
        os.environ.update(env)
        store = open_store(env["ZUNO_DB"])
        with shared_lease(store) as held:
            # Warm up first (imports, first connections): the profile is of the steady state.
            for i in range(5):
                submit(store, f"warm {i}", workspace=ws, agent="build", model="openai:bench")
            FleetWorker(store, held, idle_exit=0.0, log=lambda _line: None).serve()
            for i in range(sessions):
                submit(store, f"bench task {i}", workspace=ws, agent="build", model="openai:bench")
            fleet = FleetWorker(store, held, idle_exit=0.0, log=lambda _line: None)
            start, cpu = time.perf_counter(), time.process_time()
            if out.suffix == ".prof":
                cProfile.runctx("fleet.serve()", globals(), {"fleet": fleet}, str(out))
            else:  # a sampling profile (pyinstrument, installed by hand), as text
                from pyinstrument import Profiler

                with Profiler(interval=0.0005, async_mode="disabled") as profiler:
                    fleet.serve()
                out.write_text(
                    profiler.output_text(show_all=os.environ.get("BENCH_PROFILE_ALL") == "1")
                )
            wall, used = time.perf_counter() - start, time.process_time() - cpu
        store.close()
        calls = sessions * steps
        print(
            f"{calls} calls in {wall:.2f} s ({calls / wall:,.0f}/s, "
            f"{used / calls * 1000:.2f} CPU-ms/call, profiler on); stats in {out}"
        )


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-model":
        asyncio.run(_model_server(int(sys.argv[2])))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--db", help="a postgresql:// URL (default: the tests' server, if any)")
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    parser.add_argument("--sessions", type=int, default=50, help="sessions per run (50)")
    parser.add_argument("--steps", type=int, default=_STEPS_DEFAULT, help="read calls each (10)")
    parser.add_argument("--workers", default="1,2,4", help="worker counts (1,2,4)")
    parser.add_argument("--profile", type=Path, help="profile one worker on SQLite instead")
    args = parser.parse_args()
    if args.profile is not None:
        profile_one(args.sessions, args.steps, args.profile)
        return
    counts = [int(x) for x in args.workers.split(",")]
    print(
        f"load average before the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
        f"{args.sessions} sessions x {args.steps} read steps per run"
    )
    pg = None if args.no_pg else (args.db or _default_pg())
    with model_server(args.steps) as url:
        if not args.no_sqlite:
            results: list[RunResult] = []
            for n in counts:
                with tempfile.TemporaryDirectory() as tmp:
                    db = str(Path(tmp) / "fleet.db")
                    results.append(run_once(db, url, n, args.sessions, Path(tmp), None))
            table("SQLite (one file, WAL)", results)
        if pg:
            results: list[RunResult] = []
            for n in counts:
                with scratch_schema(pg) as dsn, tempfile.TemporaryDirectory() as tmp:
                    results.append(run_once(dsn, url, n, args.sessions, Path(tmp), pg))
            table("PostgreSQL (local, Unix socket)", results)
    print("\ntargets: one worker >= 250 calls per worker CPU-second; 2 workers >= 1.7 x one")


if __name__ == "__main__":
    main()
