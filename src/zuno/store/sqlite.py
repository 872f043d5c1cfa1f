"""The SQLite store: one file, WAL mode, one short transaction per write.

Durability: with WAL and ``synchronous=NORMAL`` a committed transaction
survives a crash of the process (``kill -9``); only a power loss can take the
last ones back. Every write that matters (a call's ``started`` row, its
result) is its own committed transaction, written before the next step that
depends on it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Generator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zuno.store.connection import StoreConnection
from zuno.store.records import CallRecord, EventRecord, SessionRecord
from zuno.store.schema import SCHEMA, SCHEMA_VERSION

if TYPE_CHECKING:
    from zuno.events import Event

__all__ = ["SQLiteStore"]

_CALL_COLUMNS = (
    "call_id, session_id, step, idx, attempt, tool, arguments, args_hash, effect, replay, "
    "concurrency, status, outcome, block_kind, result, is_error, started_at, finished_at, "
    "artifact, model_call_id, runner, reason"
)


def _call(row: sqlite3.Row | tuple[Any, ...]) -> CallRecord:
    r = tuple(row)
    return CallRecord(
        call_id=r[0],
        session_id=r[1],
        step=r[2],
        index=r[3],
        attempt=r[4],
        tool=r[5],
        arguments=r[6],
        args_hash=r[7],
        effect=r[8],
        replay=r[9],
        concurrency=r[10],
        status=r[11],
        outcome=r[12],
        block_kind=r[13],
        result=r[14],
        is_error=bool(r[15]),
        started_at=r[16],
        finished_at=r[17],
        artifact=r[18],
        model_call_id=r[19],
        runner=r[20],
        reason=r[21],
    )


class SQLiteStore:
    """The durable store in one SQLite file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._init_state()
        self._db = sqlite3.connect(
            str(path), isolation_level=None, check_same_thread=False, timeout=30.0
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        # Checkpoints are where WAL mode pays its fsyncs; doing them less often
        # keeps per-call commits cheap (the WAL is folded back on close).
        self._db.execute("PRAGMA wal_autocheckpoint=16384")
        self._create_schema()

    def _init_state(self) -> None:
        """The in-process state every store keeps beside its connection."""
        self._lock = threading.RLock()
        # Writes that need no commit of their own (a step's opening, a blocked
        # call, which changed nothing): they ride in the next transaction, in order.
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        self._last_step: dict[str, int] = {}
        # Deferred started rows by (call_id, attempt): their index in _pending.
        self._deferred_calls: dict[tuple[str, int], int] = {}

    def _create_schema(self) -> None:
        with self._tx() as db:
            for statement in SCHEMA:
                db.execute(statement)
            db.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            self._migrate(db)

    def _migrate(self, db: sqlite3.Connection) -> None:
        """Stores made before a column existed get it added, never rebuilt."""
        have = {row[1] for row in db.execute("PRAGMA table_info(calls)")}
        for column in ("runner", "reason"):
            if column not in have:
                db.execute(f"ALTER TABLE calls ADD COLUMN {column} TEXT")

    def _begin(self) -> None:
        """Start a write transaction holding the write lock."""
        self._db.execute("BEGIN IMMEDIATE")

    @property
    def artifacts_root(self) -> Path:
        """Where full outputs of this store's calls are kept."""
        return self.path.parent / (self.path.stem + "-artifacts")

    def close(self) -> None:
        with self._lock:
            self.flush()
            self._db.close()

    @contextmanager
    def _tx(self) -> Generator[sqlite3.Connection]:
        with self._lock:
            pending, self._pending = self._pending, []
            self._deferred_calls.clear()
            self._begin()
            try:
                for sql, params in pending:
                    self._db.execute(sql, params)
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                self._pending = pending + self._pending
                raise
            self._db.execute("COMMIT")

    def transaction(self) -> AbstractContextManager[StoreConnection]:
        """A committed write transaction, for modules that keep their own tables."""
        return self._tx()

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of a read query (deferred writes are committed first)."""
        self.flush()
        with self._lock:
            return [tuple(r) for r in self._db.execute(sql, params).fetchall()]

    def ensure_schema(self, statements: Sequence[str]) -> None:
        """Create a module's own tables and indexes when missing."""
        with self._tx() as db:
            for statement in statements:
                db.execute(statement)

    def flush(self) -> None:
        """Commit the deferred writes now."""
        with self._lock:
            if self._pending:
                with self._tx():
                    pass

    def _defer(self, sql: str, params: tuple[Any, ...]) -> None:
        with self._lock:
            self._pending.append((sql, params))

    _EVENT_SQL = "INSERT INTO events (session_id, call_id, kind, at, data) VALUES (?, ?, ?, ?, ?)"

    @staticmethod
    def _event_params(event: Event) -> tuple[Any, ...]:
        return (event.session_id, event.call_id, event.kind, event.at, json.dumps(event.data))

    def _insert_event(self, db: sqlite3.Connection, event: Event) -> int:
        cur = db.execute(self._EVENT_SQL, self._event_params(event))
        return int(cur.lastrowid or 0)

    # Sessions -----------------------------------------------------------------

    def create_session(
        self,
        session_id: str,
        agent: str,
        workspace: str,
        parent_call_id: str | None = None,
        model: str | None = None,
        title: str | None = None,
    ) -> SessionRecord:
        record = SessionRecord(
            session_id, time.time(), agent, workspace, parent_call_id, model, title
        )
        with self._tx() as db:
            db.execute(
                "INSERT INTO sessions (session_id, created_at, agent, workspace, parent_call_id,"
                " model, title) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (session_id, record.created_at, agent, workspace, parent_call_id, model, title),
            )
        return record

    def get_session(self, session_id: str) -> SessionRecord | None:
        self.flush()
        with self._lock:
            row = self._db.execute(
                "SELECT s.session_id, s.created_at, s.agent, s.workspace, s.parent_call_id,"
                " s.model, s.title,"
                " (SELECT COUNT(DISTINCT call_id) FROM calls c WHERE c.session_id = s.session_id)"
                " FROM sessions s WHERE s.session_id = ?",
                (session_id,),
            ).fetchone()
        return SessionRecord(*row) if row else None

    def find_sessions(self, prefix: str) -> list[str]:
        """Session ids starting with ``prefix`` (so people can type a short id)."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                "SELECT session_id FROM sessions WHERE session_id LIKE ? ESCAPE '\\'"
                " ORDER BY created_at",
                (prefix.replace("\\", "").replace("%", "").replace("_", "\\_") + "%",),
            ).fetchall()
        return [r[0] for r in rows]

    def list_sessions(self, limit: int = 1000) -> list[SessionRecord]:
        """Sessions, newest first."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                "SELECT s.session_id, s.created_at, s.agent, s.workspace, s.parent_call_id,"
                " s.model, s.title,"
                " (SELECT COUNT(DISTINCT call_id) FROM calls c WHERE c.session_id = s.session_id)"
                " FROM sessions s ORDER BY s.created_at DESC, s.rowid DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [SessionRecord(*r) for r in rows]

    def child_sessions(self, session_id: str) -> list[SessionRecord]:
        """Sessions started by calls of this session (delegations)."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT s.session_id FROM sessions s JOIN calls c"
                " ON s.parent_call_id = c.call_id WHERE c.session_id = ?"
                " ORDER BY s.session_id",
                (session_id,),
            ).fetchall()
        return [s for r in rows if (s := self.get_session(r[0])) is not None]

    def begin_step(self, session_id: str, event: Event | None = None) -> int:
        """Open the next model step of a session (with its opening event) and return its number.

        The step's row and event are deferred to the next transaction: nothing
        depends on them being durable before a call of the step starts.
        """
        with self._lock:
            last = self._last_step.get(session_id)
            if last is None:
                row = self._db.execute(
                    "SELECT COALESCE(MAX(step), 0) FROM steps WHERE session_id = ?", (session_id,)
                ).fetchone()
                last = int(row[0])
            step = last + 1
            self._last_step[session_id] = step
            self._defer(
                "INSERT OR IGNORE INTO steps (session_id, step, created_at) VALUES (?, ?, ?)",
                (session_id, step, time.time()),
            )
            if event is not None:
                event.data["step"] = step
                self._defer(self._EVENT_SQL, self._event_params(event))
        return step

    # Calls ----------------------------------------------------------------------

    _CALL_SQL = (
        f"INSERT INTO calls ({_CALL_COLUMNS}) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    @staticmethod
    def _call_params(call: CallRecord) -> tuple[Any, ...]:
        return (
            call.call_id,
            call.session_id,
            call.step,
            call.index,
            call.attempt,
            call.tool,
            call.arguments,
            call.args_hash,
            call.effect,
            call.replay,
            call.concurrency,
            call.status,
            call.outcome,
            call.block_kind,
            call.result,
            int(call.is_error),
            call.started_at,
            call.finished_at,
            call.artifact,
            call.model_call_id,
            call.runner,
            call.reason,
        )

    def _insert_call(self, db: sqlite3.Connection, call: CallRecord) -> None:
        db.execute(self._CALL_SQL, self._call_params(call))

    def record_blocked(self, call: CallRecord, event: Event) -> None:
        """A refused call: its event, then its finished ``blocked`` row.

        Deferred to the next transaction (at the latest the end of the step):
        a blocked call changed nothing, so nothing else waits on it.
        """
        with self._lock:
            self._defer(self._EVENT_SQL, self._event_params(event))
            self._defer(self._CALL_SQL, self._call_params(call))

    def call_started(self, call: CallRecord, event: Event, *, durable: bool = True) -> None:
        """Intent before effect: the ``started`` row is committed before the call runs.

        ``durable=False`` defers the row to the next transaction (the call's own
        result, at the latest): for read-only calls, which have no effect to
        precede, this saves a commit per call.
        """
        if not durable:
            with self._lock:
                self._deferred_calls[(call.call_id, call.attempt)] = len(self._pending)
                self._defer(self._CALL_SQL, self._call_params(call))
                self._defer(self._EVENT_SQL, self._event_params(event))
            return
        with self._tx() as db:
            self._insert_call(db, call)
            self._insert_event(db, event)

    def call_finished(self, call: CallRecord, event: Event) -> None:
        """The result of an attempt, committed as soon as it is known."""
        with self._lock:
            slot = self._deferred_calls.pop((call.call_id, call.attempt), None)
            if slot is not None and slot < len(self._pending):
                # Its started row is still waiting: write the finished row in its
                # place, one insert instead of an insert and an update.
                self._pending[slot] = (self._CALL_SQL, self._call_params(call))
                with self._tx() as db:
                    self._insert_event(db, event)
                return
        with self._tx() as db:
            db.execute(
                "UPDATE calls SET status = 'finished', outcome = ?, block_kind = ?, result = ?,"
                " is_error = ?, finished_at = ?, artifact = ?, reason = ?"
                " WHERE call_id = ? AND attempt = ?",
                (
                    call.outcome,
                    call.block_kind,
                    call.result,
                    int(call.is_error),
                    call.finished_at,
                    call.artifact,
                    call.reason,
                    call.call_id,
                    call.attempt,
                ),
            )
            self._insert_event(db, event)

    def calls(self, session_id: str) -> list[CallRecord]:
        """Every attempt of every call of a session, in the model's order."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_CALL_COLUMNS} FROM calls WHERE session_id = ?"
                " ORDER BY step, idx, attempt",
                (session_id,),
            ).fetchall()
        return [_call(r) for r in rows]

    def unfinished_calls(self, session_id: str | None = None) -> list[CallRecord]:
        """Rows left ``started``: their outcome is unknown."""
        self.flush()
        with self._lock:
            if session_id is None:
                rows = self._db.execute(
                    f"SELECT {_CALL_COLUMNS} FROM calls WHERE status = 'started'"
                ).fetchall()
            else:
                rows = self._db.execute(
                    f"SELECT {_CALL_COLUMNS} FROM calls WHERE status = 'started'"
                    " AND session_id = ? ORDER BY step, idx, attempt",
                    (session_id,),
                ).fetchall()
        return [_call(r) for r in rows]

    # Events ---------------------------------------------------------------------

    def append_event(self, event: Event) -> int:
        with self._tx() as db:
            return self._insert_event(db, event)

    def append_events(
        self, events: list[Event], deliver: Callable[[Event], None] | None = None
    ) -> None:
        """Several events, in order, with the next transaction (then handed to ``deliver``).

        Used for the close of a step (``call.result`` and ``dispatch.finished``):
        the call rows they describe are already committed, so these ride along
        with the next write, a read, or :meth:`close`.
        """
        with self._lock:
            for event in events:
                self._defer(self._EVENT_SQL, self._event_params(event))
        if deliver is not None:
            for event in events:
                deliver(event)

    def events(self, session_id: str) -> list[EventRecord]:
        """The events of a session, in the order they were emitted."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                "SELECT seq, session_id, call_id, kind, at, data FROM events"
                " WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [EventRecord(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in rows]

    # Approvals ------------------------------------------------------------------

    def add_session_approval(self, session_id: str, fingerprint: str, tool: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO approvals (session_id, fingerprint, tool, at)"
                " VALUES (?, ?, ?, ?)",
                (session_id, fingerprint, tool, time.time()),
            )

    def has_session_approval(self, session_id: str, fingerprint: str) -> bool:
        self.flush()
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM approvals WHERE session_id = ? AND fingerprint = ?",
                (session_id, fingerprint),
            ).fetchone()
        return row is not None

    # Messages (the conversation of the agent loop) ---------------------------

    def append_message(self, session_id: str, role: str, body: dict[str, Any]) -> int:
        with self._tx() as db:
            row = db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            seq = int(row[0])
            db.execute(
                "INSERT INTO messages (session_id, seq, role, body, at) VALUES (?, ?, ?, ?, ?)",
                (session_id, seq, role, json.dumps(body), time.time()),
            )
        return seq

    def messages(self, session_id: str) -> list[tuple[str, dict[str, Any]]]:
        self.flush()
        with self._lock:
            rows = self._db.execute(
                "SELECT role, body FROM messages WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [(r[0], json.loads(r[1])) for r in rows]
