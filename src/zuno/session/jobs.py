"""The background lane: jobs that run outside the foreground path.

An IsolatedBackground call (``shell`` with ``background: true``, a background
``task``) starts a job and returns its id at once. The job runs in the
runtime's task group while the agent goes on; ``bg`` and ``job`` inspect it.

Every job is a row in the store (command, pid, state, exit code, output file)
written when it starts and when it ends. Its output goes to a file as it
arrives, so ``bg output`` can page through it with offsets while it runs.
A job is owned by the worker that started it (its ``runner``, see
:mod:`zuno.durability.workers`): when that worker is gone (its lease expired, or its
process is dead on this machine) and the row still says ``running``, the job
is reported ``lost``, never ``finished``, because nobody saw it end. A job's
end that arrives after it was marked lost is a ``job.late_result`` event
beside the row, never written over it. Rows are judged when they are read or
their session is resumed, never by a sweep of every session.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from zuno.contract.output import CappedFile
from zuno.durability.store import Store
from zuno.durability.store.errors import StoreUnavailable
from zuno.durability.workers import runner_settleable, this_worker

if TYPE_CHECKING:
    from zuno.contract.tool import ToolContext

__all__ = [
    "JobEnd",
    "JobIO",
    "JobLane",
    "JobRecord",
    "JobState",
    "JobsUnavailable",
    "job_timeout_default",
]

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS jobs (
        job_id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        description TEXT NOT NULL,
        pid INTEGER,
        state TEXT NOT NULL,
        exit_code INTEGER,
        detail TEXT,
        started_at DOUBLE PRECISION NOT NULL,
        finished_at DOUBLE PRECISION,
        output_path TEXT NOT NULL,
        owner_pid INTEGER NOT NULL,
        owner_start TEXT NOT NULL
    )""",
    """CREATE INDEX IF NOT EXISTS jobs_by_session ON jobs (session_id, started_at)""",
    # The jobs still running: what a resume or a read has to judge.
    """CREATE INDEX IF NOT EXISTS jobs_running ON jobs (session_id) WHERE state = 'running'""",
]
_ADDED = [("jobs", "runner", "TEXT")]
"""The owning worker's id (``w1:...``); rows made before it have owner_pid:owner_start."""
_COLUMNS = (
    "job_id, session_id, call_id, kind, description, pid, state, exit_code, detail, started_at,"
    " finished_at, output_path, owner_pid, owner_start, runner"
)
_LOST = "the Zuno process running it is gone; whether it finished is unknown"


_END_TRIES = 4
"""Tries to write a job's end across broken connections before giving up."""


class JobState(StrEnum):
    """Where a job is in its life."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    LOST = "lost"
    """Its owner process is gone and nobody saw it end: its outcome is unknown."""

    @property
    def done(self) -> bool:
        return self is not JobState.RUNNING


def job_timeout_default(ctx: ToolContext) -> int:
    """``sandbox.job_timeout_default`` of the context's configuration."""
    from zuno.config.sandbox import SandboxSettings

    section = getattr(ctx.config, "sandbox", None)
    found = getattr(section, "job_timeout_default", None)
    return found if isinstance(found, int) else SandboxSettings().job_timeout_default


class JobsUnavailable(Exception):
    """Background jobs need a running runtime (``async with runtime:``)."""


@dataclass(slots=True)
class JobRecord:
    """A job row."""

    job_id: str
    session_id: str
    call_id: str
    kind: str
    description: str
    pid: int | None
    state: JobState
    exit_code: int | None
    detail: str | None
    started_at: float
    finished_at: float | None
    output_path: str
    owner_pid: int
    owner_start: str
    runner: str | None = None
    """The worker running it (``w1:...``); None in rows made before leases."""

    @property
    def owner(self) -> str:
        """The owner as a runner text (legacy rows: ``owner_pid:owner_start``)."""
        return self.runner or f"{self.owner_pid}:{self.owner_start}"

    @property
    def output_bytes(self) -> int:
        try:
            return os.path.getsize(self.output_path)
        except OSError:
            return 0

    def as_dict(self) -> dict[str, Any]:
        from zuno.durability.store.records import iso

        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "description": self.description,
            "state": self.state.value,
            "pid": self.pid,
            "exit_code": self.exit_code,
            "detail": self.detail,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "output_bytes": self.output_bytes,
            "output_path": self.output_path,
            "session_id": self.session_id,
            "call_id": self.call_id,
        }


@dataclass(frozen=True, slots=True)
class JobEnd:
    """How a job's body says it ended."""

    exit_code: int | None = None
    state: JobState | None = None
    """Overrides the state derived from the exit code (a timeout, a signal)."""
    detail: str | None = None


class JobIO:
    """What a running job writes to: its output file and its pid."""

    def __init__(self, lane: JobLane, record: JobRecord, sink: CappedFile) -> None:
        self._lane = lane
        self.record = record
        self._sink = sink

    @property
    def job_id(self) -> str:
        return self.record.job_id

    def write(self, data: bytes) -> None:
        """Append output (flushed, so readers see it while the job runs).

        Past the lane's cap only the output's first and last parts are kept.
        """
        self._sink.write(data)

    def record_egress(self, rows: list[dict[str, Any]]) -> None:
        """Store the job's egress ledger (``proxy`` network mode) beside the call that
        started it, as a ``job.egress`` event: ``zuno show`` and ``zuno network
        suggest`` read it with the calls' own."""
        if not rows:
            return
        record = self.record
        with self._lane.store.transaction() as db:
            db.execute(
                "INSERT INTO events (session_id, call_id, kind, at, data) VALUES (?, ?, ?, ?, ?)",
                (
                    record.session_id,
                    record.call_id,
                    "job.egress",
                    time.time(),
                    json.dumps({"job_id": record.job_id, "egress": rows}),
                ),
            )

    def set_pid(self, pid: int | None) -> None:
        """Record the process the job started."""
        self.record.pid = pid
        with self._lane.store.transaction() as db:
            db.execute("UPDATE jobs SET pid = ? WHERE job_id = ?", (pid, self.record.job_id))


JobBody = Callable[[JobIO], Awaitable[JobEnd]]


class JobLane:
    """Starts, tracks, waits for and cancels background jobs."""

    def __init__(self, store: Store, output_root: Path, output_cap: int | None = None) -> None:
        """A lane writing job rows to store and job logs under output_root.

        ``output_cap`` is the most one job's log keeps (``tool_output.artifact_max_bytes``);
        past it the middle of the output is dropped, as for a foreground command.
        """
        self.store = store
        self.output_root = output_root
        self.output_cap = output_cap
        self._sinks: dict[str, CappedFile] = {}
        self._tg: TaskGroup | None = None
        self._scopes: dict[str, anyio.CancelScope] = {}
        self._done: dict[str, anyio.Event] = {}
        self._worker = this_worker()
        store.ensure_schema(_SCHEMA, _ADDED)

    # Lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> JobLane:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        for scope in list(self._scopes.values()):
            scope.cancel()
        assert self._tg is not None
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            self._tg = None

    @property
    def running(self) -> bool:
        """Whether jobs can be started (inside ``async with``)."""
        return self._tg is not None

    def mark_lost(self, session_id: str | None = None) -> list[str]:
        """Jobs left ``running`` by a worker that is gone are lost (of one session, or all)."""
        sql = f"SELECT {_COLUMNS} FROM jobs WHERE state = 'running'"
        params: tuple[Any, ...] = ()
        if session_id is not None:
            sql += " AND session_id = ?"
            params = (session_id,)
        return self._settle([_record(r) for r in self.store.query(sql, params)])

    def _settle(self, jobs: list[JobRecord]) -> list[str]:
        """Mark lost those of ``jobs`` still running whose owner may be settled; their ids."""
        running = [j for j in jobs if j.state is JobState.RUNNING and j.job_id not in self._scopes]
        if not running:
            return []
        verdicts: dict[str, bool] = {}
        for job in running:
            if job.owner not in verdicts:
                verdicts[job.owner] = runner_settleable(self.store, job.owner)
        gone = [j for j in running if verdicts[j.owner]]
        lost: list[str] = []
        if not gone:
            return lost
        with self.store.transaction() as db:
            for job in gone:
                row = db.execute(
                    "UPDATE jobs SET state = 'lost', detail = ? WHERE job_id = ?"
                    " AND state = 'running' RETURNING job_id",
                    (_LOST, job.job_id),
                ).fetchone()
                if row is not None:
                    job.state = JobState.LOST
                    job.detail = _LOST
                    lost.append(job.job_id)
        return lost

    # Starting -------------------------------------------------------------------

    async def start(
        self,
        *,
        kind: str,
        description: str,
        session_id: str,
        call_id: str,
        body: JobBody,
        time_limit: float | None = None,
    ) -> JobRecord:
        """Write the job's row, then run ``body`` in the background."""
        if self._tg is None:
            raise JobsUnavailable(
                "background jobs need a running runtime; this one was not started with "
                "`async with runtime:`"
            )
        from zuno.dispatch.dispatcher import new_id

        job_id = new_id("job")
        output = self.output_root / f"{job_id}.log"
        output.parent.mkdir(parents=True, exist_ok=True)
        record = JobRecord(
            job_id,
            session_id,
            call_id,
            kind,
            description,
            None,
            JobState.RUNNING,
            None,
            None,
            time.time(),
            None,
            str(output),
            self._worker.pid,
            self._worker.start,
            self._worker.id,
        )
        with self.store.transaction() as db:
            db.execute(
                f"INSERT INTO jobs ({_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.job_id,
                    session_id,
                    call_id,
                    kind,
                    description,
                    None,
                    record.state.value,
                    None,
                    None,
                    record.started_at,
                    None,
                    record.output_path,
                    record.owner_pid,
                    record.owner_start,
                    record.runner,
                ),
            )
        scope = anyio.CancelScope()
        self._scopes[job_id] = scope
        self._done[job_id] = anyio.Event()
        self._tg.start_soon(self._run, record, body, time_limit, scope)
        return record

    async def start_for_call(
        self,
        ctx: ToolContext,
        *,
        kind: str,
        description: str,
        body: JobBody,
        time_limit: float | None = None,
    ) -> JobRecord:
        """:meth:`start` for the call of ``ctx``; a lane that is not running is a tool error.

        Without a time limit the job gets ``sandbox.job_timeout_default``.
        """
        from zuno.contract.tool import ToolError

        if time_limit is None:
            time_limit = job_timeout_default(ctx)

        try:
            return await self.start(
                kind=kind,
                description=description,
                session_id=ctx.session_id,
                call_id=ctx.call_id,
                body=body,
                time_limit=time_limit,
            )
        except JobsUnavailable as exc:
            raise ToolError(str(exc)) from exc

    async def _run(
        self, record: JobRecord, body: JobBody, time_limit: float | None, scope: anyio.CancelScope
    ) -> None:
        end = JobEnd(state=JobState.CANCELLED, detail="cancelled")
        # A local append-only log: opening it does not block in any way that matters.
        sink = CappedFile(Path(record.output_path), self.output_cap, append=True, live=True)
        self._sinks[record.job_id] = sink
        io = JobIO(self, record, sink)
        try:
            with scope:
                if time_limit is None:
                    end = await body(io)
                else:
                    with anyio.fail_after(time_limit):
                        end = await body(io)
        except TimeoutError:
            end = JobEnd(state=JobState.TIMED_OUT, detail=f"stopped after {time_limit:g}s")
        except Exception as exc:
            end = JobEnd(state=JobState.FAILED, detail=f"{type(exc).__name__}: {exc}")
        finally:
            self._sinks.pop(record.job_id, None)
            sink.close("job output")
            self._finish(record, end)

    def _finish(self, record: JobRecord, end: JobEnd) -> None:
        state = end.state or (JobState.SUCCEEDED if end.exit_code in (0, None) else JobState.FAILED)
        record.state = state
        record.exit_code = end.exit_code
        record.detail = end.detail
        record.finished_at = time.time()
        for attempt in range(_END_TRIES):
            try:
                self._write_end(record, state, end)
                break
            except StoreUnavailable:
                # A connection broken under the write (a fence interrupting a stuck
                # transaction, a server restart): the end is written on the next one.
                if attempt == _END_TRIES - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))
        self._scopes.pop(record.job_id, None)
        done = self._done.pop(record.job_id, None)
        if done is not None:
            done.set()

    def _write_end(self, record: JobRecord, state: JobState, end: JobEnd) -> None:
        """The job's end on its row, or beside it as ``job.late_result`` when it was lost.

        Written again after a broken connection: an end this worker already wrote
        (the same state and time) is found as its own, not taken for a late one.
        """
        with self.store.transaction() as db:
            # Guarded: a row another worker marked lost stays lost; the end goes beside it.
            row = db.execute(
                "UPDATE jobs SET state = ?, exit_code = ?, detail = ?, finished_at = ?"
                " WHERE job_id = ? AND (state = 'running' OR (state = ? AND finished_at = ?))"
                " RETURNING job_id",
                (
                    state.value,
                    end.exit_code,
                    end.detail,
                    record.finished_at,
                    record.job_id,
                    state.value,
                    record.finished_at,
                ),
            ).fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO events (session_id, call_id, kind, at, data)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (
                        record.session_id,
                        record.call_id,
                        "job.late_result",
                        record.finished_at,
                        json.dumps(
                            {
                                "job_id": record.job_id,
                                "state": state.value,
                                "exit_code": end.exit_code,
                                "detail": end.detail,
                                "runner": record.runner,
                            }
                        ),
                    ),
                )

    # Inspecting -------------------------------------------------------------------

    def get(self, job_id: str) -> JobRecord | None:
        """The job's row; a running job whose owner is gone is marked lost first."""
        rows = self.store.query(f"SELECT {_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,))
        if not rows:
            return None
        job = _record(rows[0])
        self._settle([job])
        return job

    def list(self, session_id: str | None = None, state: JobState | None = None) -> list[JobRecord]:
        sql = f"SELECT {_COLUMNS} FROM jobs WHERE 1 = 1"
        params: list[Any] = []
        if session_id is not None:
            sql += " AND session_id = ?"
            params.append(session_id)
        if state is not None:
            sql += " AND state = ?"
            params.append(state.value)
        jobs = [_record(r) for r in self.store.query(sql + " ORDER BY started_at", tuple(params))]
        self._settle(jobs)
        if state is not None:
            jobs = [j for j in jobs if j.state is state]
        return jobs

    def mine_running(self) -> list[str]:
        """Ids of the jobs this process is running."""
        return list(self._scopes)

    async def wait(self, job_id: str) -> None:
        """Wait for a job to end (bound it with the caller's cancel scope)."""
        done = self._done.get(job_id)
        if done is not None:
            await done.wait()
            return
        # A job of another process: nothing signals here, so its row is polled.
        while (job := self.get(job_id)) is not None and not job.state.done:  # noqa: ASYNC110
            await anyio.sleep(0.2)

    async def cancel(self, job_id: str) -> JobRecord:
        """Cancel a job this process runs, and wait for it to stop."""
        scope = self._scopes.get(job_id)
        if scope is None:
            job = self.get(job_id)
            if job is None:
                raise KeyError(job_id)
            return job
        scope.cancel()
        done = self._done.get(job_id)
        if done is not None:
            await done.wait()
        job = self.get(job_id)
        assert job is not None
        return job

    def read_output(self, job_id: str, offset: int, max_bytes: int) -> tuple[bytes, int]:
        """Up to ``max_bytes`` of a job's output from ``offset``; returns the bytes and the end."""
        job = self.get(job_id)
        if job is None:
            raise KeyError(job_id)
        # A running job past its cap holds a ring in the log's second half: only
        # the start reads in order until the job ends and the log is reassembled.
        sink = self._sinks.get(job_id)
        if sink is not None:
            max_bytes = max(0, min(max_bytes, sink.ordered_bytes - offset))
        try:
            with open(job.output_path, "rb") as f:
                f.seek(offset)
                data = f.read(max_bytes)
        except FileNotFoundError:
            data = b""
        return data, offset + len(data)


def _record(r: tuple[Any, ...]) -> JobRecord:
    return JobRecord(
        r[0],
        r[1],
        r[2],
        r[3],
        r[4],
        r[5],
        JobState(r[6]),
        r[7],
        r[8],
        r[9],
        r[10],
        r[11],
        r[12],
        r[13],
        r[14],
    )
