"""The interactive processes of one runtime, and the rows that outlive them.

A :class:`ProcessTable` belongs to one runtime and holds its live
:class:`~zuno.execution.pty.InteractiveProcess` objects; leaving it (the end
of ``async with runtime``) kills every one. Each Zuno session may have at most
:data:`MAX_LIVE` processes running at once.

What the store keeps. Calls are ordinary call rows. Besides them, each
process has a row in ``exec_processes`` (its number in the session, the call
that started it, command, pid, state, exit code, transcript path, runner),
written when it starts and when it ends. Process numbers count up per Zuno
session and are never reused. The live process is not durable: after a
restart (or in another Zuno process), a number is reported as gone, never
reattached to anything, and a row left ``running`` by a runner that is gone
is marked ``lost``.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from zuno.durability.store import Store
from zuno.durability.workers import runner_settleable, this_worker
from zuno.execution.pty import InteractiveProcess, Launched, ProcessState

__all__ = [
    "MAX_LIVE",
    "ProcessGone",
    "ProcessRow",
    "ProcessTable",
    "TooManyProcesses",
    "processes_for",
]

MAX_LIVE = 8
"""Processes one Zuno session may have running at once."""
_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS exec_processes (
        session_id TEXT NOT NULL,
        number INTEGER NOT NULL,
        call_id TEXT NOT NULL,
        command TEXT NOT NULL,
        tty INTEGER NOT NULL,
        pid INTEGER,
        state TEXT NOT NULL,
        exit_code INTEGER,
        detail TEXT,
        started_at DOUBLE PRECISION NOT NULL,
        ended_at DOUBLE PRECISION,
        transcript TEXT NOT NULL,
        runner TEXT NOT NULL,
        PRIMARY KEY (session_id, number)
    )""",
]


class ProcessGone(Exception):
    """No live process has that number in this session; the message says why."""


class TooManyProcesses(Exception):
    """The session already has :data:`MAX_LIVE` processes running."""


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """A stored ``exec_processes`` row (what outlives the process)."""

    session_id: str
    number: int
    call_id: str
    command: str
    state: str
    exit_code: int | None
    detail: str | None
    runner: str
    transcript: str


_ROW_COLUMNS = "session_id, number, call_id, command, state, exit_code, detail, runner, transcript"


class ProcessTable:
    """The interactive processes of one runtime, open while the runtime runs."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._live: dict[tuple[str, int], InteractiveProcess] = {}
        self._open = False
        self._schema = False
        self._worker = this_worker()

    def __enter__(self) -> ProcessTable:
        self._open = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def running(self) -> bool:
        """Whether processes can be started (the runtime is inside ``async with``)."""
        return self._open

    def close(self) -> None:
        """Kill every process, record how each ended, and stop taking new ones."""
        self._open = False
        for proc in list(self._live.values()):
            proc.kill("killed when the runtime ended")
        for key, proc in list(self._live.items()):
            proc.close()
            if proc.state is ProcessState.RUNNING:
                proc.state = ProcessState.KILLED
            self.record_end(proc)
            del self._live[key]

    def _ensure_schema(self) -> None:
        if not self._schema:
            self.store.ensure_schema(_SCHEMA)
            self._schema = True

    def live_count(self, session_id: str) -> int:
        """How many processes of the session are still running."""
        return sum(1 for (s, _), p in self._live.items() if s == session_id and not p.ended)

    def start(self, session_id: str, call_id: str, spec: Launched) -> InteractiveProcess:
        """Start a process and write its row; its number is the session's next.

        Raises:
            TooManyProcesses: The session has :data:`MAX_LIVE` running already.
            OSError: The sandbox or the program could not start.
        """
        self._ensure_schema()
        if self.live_count(session_id) >= MAX_LIVE:
            raise TooManyProcesses(
                f"this session already has {MAX_LIVE} interactive processes running; "
                "end one with exec_kill (or let it exit) before starting another"
            )
        with self.store.transaction() as db:
            row = db.execute(
                "SELECT COALESCE(MAX(number), 0) FROM exec_processes WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            number = int(row[0]) + 1 if row is not None else 1
            db.execute(
                "INSERT INTO exec_processes (session_id, number, call_id, command, tty, pid,"
                " state, started_at, transcript, runner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    number,
                    call_id,
                    spec.command,
                    int(spec.tty),
                    None,
                    ProcessState.RUNNING.value,
                    time.time(),
                    str(spec.transcript),
                    self._worker.id,
                ),
            )
        try:
            proc = InteractiveProcess(session_id, number, call_id, spec)
        except BaseException as exc:
            with self.store.transaction() as db:
                db.execute(
                    "UPDATE exec_processes SET state = ?, detail = ?, ended_at = ?"
                    " WHERE session_id = ? AND number = ?",
                    ("exited", f"did not start: {exc}", time.time(), session_id, number),
                )
            raise
        self._live[(session_id, number)] = proc
        with self.store.transaction() as db:
            db.execute(
                "UPDATE exec_processes SET pid = ? WHERE session_id = ? AND number = ?",
                (proc.pid, session_id, number),
            )
        return proc

    def get(self, session_id: str, number: int) -> InteractiveProcess:
        """The live (or just ended, with output left) process ``number`` of the session.

        Raises:
            ProcessGone: It is not in this runtime; the message says what is known.
        """
        proc = self._live.get((session_id, number))
        if proc is not None:
            return proc
        raise ProcessGone(self._gone_reason(session_id, number))

    def forget(self, proc: InteractiveProcess) -> None:
        """Drop an ended process whose output was all delivered, recording its end."""
        proc.close()
        self.record_end(proc)
        self._live.pop((proc.session_id, proc.number), None)

    def record_end(self, proc: InteractiveProcess) -> None:
        """Write how the process ended to its row (once)."""
        if proc.recorded_end:
            return
        proc.recorded_end = True
        code = proc.exit_code
        detail: str | None = None
        if proc.state is ProcessState.KILLED:
            detail = proc.kill_reason
        elif proc.state is ProcessState.TIMED_OUT:
            detail = f"killed at its deadline of {proc.time_limit:g} s"
        elif proc.signal is not None:
            detail = f"ended by {proc.signal_name}"
        with self.store.transaction() as db:
            db.execute(
                "UPDATE exec_processes SET state = ?, exit_code = ?, detail = ?, ended_at = ?"
                " WHERE session_id = ? AND number = ? AND state = 'running'",
                (proc.state.value, code, detail, time.time(), proc.session_id, proc.number),
            )

    def row(self, session_id: str, number: int) -> ProcessRow | None:
        """The stored row of a process, live or not."""
        self._ensure_schema()
        rows = self.store.query(
            f"SELECT {_ROW_COLUMNS} FROM exec_processes WHERE session_id = ? AND number = ?",
            (session_id, number),
        )
        return ProcessRow(*rows[0]) if rows else None

    def _gone_reason(self, session_id: str, number: int) -> str:
        found = self.row(session_id, number)
        if found is None:
            return (
                f"there is no process {number} in this session; exec_command returns the "
                "number of the process it starts"
            )
        if found.state == ProcessState.RUNNING.value:
            if runner_settleable(self.store, found.runner):
                with self.store.transaction() as db:
                    db.execute(
                        "UPDATE exec_processes SET state = 'lost', detail = ?"
                        " WHERE session_id = ? AND number = ? AND state = 'running'",
                        ("its Zuno process ended", session_id, number),
                    )
            return (
                f"process {number} is gone: the Zuno process that started it has ended (or is "
                "another one), and interactive processes end with it; they are never "
                "reattached. Start the command again with exec_command if it is still needed"
            )
        how = found.detail or found.state
        code = f", exit code {found.exit_code}" if found.exit_code is not None else ""
        return (
            f"process {number} has ended ({how}{code}) and all its output was returned; "
            f"its transcript is {found.transcript}"
        )


_TABLES: weakref.WeakKeyDictionary[Any, ProcessTable] = weakref.WeakKeyDictionary()


def processes_for(runtime: Any) -> ProcessTable:
    """The process table of a runtime (made on first use).

    The runtime enters it for as long as it runs (``async with runtime``), so
    that leaving kills every process it holds.
    """
    table = _TABLES.get(runtime)
    if table is None:
        table = ProcessTable(runtime.store)
        _TABLES[runtime] = table
    return table
