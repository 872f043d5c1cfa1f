"""The transcript in the store: steps, calls, events, approvals and messages.

:class:`SQLStore` is the whole store, written once for both databases: its
statements are SQLite's dialect (the PostgreSQL store rewrites them). Every
write that matters (a call's ``started`` row, its result) is its own committed
transaction, written before the next step that depends on it; what needs no
commit of its own rides with the next one (:mod:`zuno.durability.store.core`).

A result arriving for a row another worker has settled meanwhile is recorded
as a ``call.late_result`` event beside it, never over it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from zuno.durability.store.core import CALL_COLUMNS, OWNER_FENCE
from zuno.durability.store.errors import SessionBusy, StoreUnavailable
from zuno.durability.store.records import CallRecord, EventRecord
from zuno.durability.store.sessions import SessionStore

if TYPE_CHECKING:
    from zuno.contract.events import Event

__all__ = ["SQLStore"]

_DEFERRED_STEP_SQL = "INSERT INTO steps (session_id, step, created_at) VALUES (?, ?, ?)"

_PREVIEW = 200
"""Characters of a late result kept in its ``call.late_result`` event."""


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
        snapshot=r[22],
        mode=r[23],
        start_seq=r[24],
        finish_seq=r[25],
    )


class SQLStore(SessionStore):
    """The durable store, whichever database holds it (one of its subclasses says which)."""

    # Events of the transcript ---------------------------------------------------

    _EVENT_SQL = "INSERT INTO events (session_id, call_id, kind, at, data) VALUES (?, ?, ?, ?, ?)"

    def _event_params(self, event: Event) -> tuple[Any, ...]:
        at = event.at + self.clock_offset
        return (event.session_id, event.call_id, event.kind, at, json.dumps(event.data))

    def _insert_event(self, db: sqlite3.Connection, event: Event) -> int:
        cur = db.execute(*self._event_entry(event))
        return int(cur.lastrowid or 0)

    _OWNED_EVENT_SQL = (
        "INSERT INTO events (session_id, call_id, kind, at, data) SELECT ?, ?, ?, ?, ?"
        " WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = ? AND s.owner = ?)"
    )
    """An event of a session this process holds: written only while it still holds it."""

    def _event_entry(self, event: Event) -> tuple[str, tuple[Any, ...]]:
        """The statement writing ``event``: fenced by its owner when this process holds it."""
        owner = self._owner(event.session_id)
        if owner is None:
            return self._EVENT_SQL, self._event_params(event)
        return self._OWNED_EVENT_SQL, (*self._event_params(event), event.session_id, owner)

    # Steps ----------------------------------------------------------------------

    def begin_step(
        self, session_id: str, event: Event | None = None, *, worker: str | None = None
    ) -> int:
        """Open the next model step of a session (with its opening event) and return its number.

        The number is allocated inside the write transaction (no cached maximum
        that another process could make stale), and a clash is an error, never
        skipped. With ``worker``, the step opens only while that worker holds the
        session (else :class:`SessionBusy`, and nothing is written).

        When the store's write lock is held elsewhere, the step still opens (its
        read-only calls can run): the number is read under the session's lease
        (only its holder opens steps) and the row waits for the next transaction.
        """
        if worker is not None:
            self._owner(session_id)  # a session lost by this process opens no step
        try:
            with self._tx() as db:
                if worker is not None:
                    self._fence(db, session_id, worker)
                row = db.execute(
                    "INSERT INTO steps (session_id, step, created_at)"
                    " SELECT ?, COALESCE(MAX(step), 0) + 1, ? FROM steps WHERE session_id = ?"
                    " RETURNING step",
                    (session_id, self.clock(), session_id),
                ).fetchone()
                step = int(row[0])
                if event is not None:
                    event.data["step"] = step
                    db.execute(*self._event_entry(event))
            return step
        except SessionBusy:
            raise
        except StoreUnavailable:
            pass
        with self._lock:
            if worker is not None:
                self._fence(self._db, session_id, worker)
            row = self._db.execute(
                "SELECT COALESCE(MAX(step), 0) FROM steps WHERE session_id = ?", (session_id,)
            ).fetchone()
            waiting = [
                int(entry[1][1])
                for entry in self._pending
                if not callable(entry)
                and entry[0] == _DEFERRED_STEP_SQL
                and entry[1][0] == session_id
            ]
            step = max([int(row[0]), *waiting]) + 1
            # A plain INSERT: a clash is set aside with a warning, never silently skipped.
            self._defer(_DEFERRED_STEP_SQL, (session_id, step, self.clock()))
            if event is not None:
                event.data["step"] = step
                self._defer(*self._event_entry(event))
        return step

    # Calls ----------------------------------------------------------------------

    _CALL_SQL = (
        f"INSERT INTO calls ({CALL_COLUMNS}) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    def _call_params(self, call: CallRecord) -> tuple[Any, ...]:
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
            self._on_clock(call.started_at),
            self._on_clock(call.finished_at),
            call.artifact,
            call.model_call_id,
            call.runner,
            call.reason,
            call.snapshot,
            call.mode,
            call.start_seq,
            call.finish_seq,
        )

    def _finish_params(self, call: CallRecord) -> tuple[Any, ...]:
        """The parameters of a guarded result: its columns, then the row's key."""
        return (
            call.outcome,
            call.block_kind,
            call.result,
            int(call.is_error),
            self._on_clock(call.finished_at),
            call.artifact,
            call.reason,
            call.finish_seq,
            call.call_id,
            call.attempt,
        )

    def _insert_call(self, db: sqlite3.Connection, call: CallRecord) -> None:
        db.execute(self._CALL_SQL, self._call_params(call))

    def record_blocked(self, call: CallRecord, event: Event) -> None:
        """A refused call: its event, then its finished ``blocked`` row.

        Deferred to the next transaction (at the latest the end of the step):
        a blocked call changed nothing, so nothing else waits on it.
        """
        with self._lock:
            self._defer(*self._event_entry(event))
            self._defer(self._CALL_SQL, self._call_params(call))

    def call_started(
        self, call: CallRecord, event: Event, *, durable: bool = True, fence: bool = False
    ) -> None:
        """Intent before effect: the ``started`` row is committed before the call runs.

        ``durable=False`` defers the row to the next transaction (the call's own
        result, at the latest): for read-only calls, which have no effect to
        precede, this saves a commit per call (their step's opening was fenced).
        ``fence``: insert the row only while the session is leased to
        ``call.runner`` (else :class:`SessionBusy`: the call must not run).
        """
        if not durable:
            with self._lock:
                self._deferred_calls[(call.call_id, call.attempt)] = len(self._pending)
                self._defer(self._CALL_SQL, self._call_params(call))
                self._defer(*self._event_entry(event))
            return
        if fence:
            self._owner(call.session_id)  # a session lost by this process runs nothing
        with self._tx() as db:
            if fence and call.runner is not None:
                self._fence(db, call.session_id, call.runner)
            self._insert_call(db, call)
            self._insert_event(db, event)

    def call_finished(self, call: CallRecord, event: Event, *, commit: bool = True) -> None:
        """The result of an attempt, committed as soon as it is known.

        When the store cannot commit right now (its lock held elsewhere past the
        busy timeout), the result stays queued and is written with the next
        transaction: a call that ran is never recorded as not run.

        ``commit=False`` leaves the result queued for the caller's next
        :meth:`flush_or_keep` (or any transaction before it): the dispatcher
        commits the results of a step's read-only calls, which nothing waits
        on, together once they are all in, instead of one commit each.
        """
        with self._lock:
            slot = self._deferred_calls.pop((call.call_id, call.attempt), None)
            if slot is not None and slot < len(self._pending):
                # Its started row is still waiting: write the finished row in its
                # place, one insert instead of an insert and an update.
                self._pending[slot] = (self._CALL_SQL, self._call_params(call))
                self._defer(*self._event_entry(event))
            else:
                self._defer_call(self._guarded_finish(call, event))
            if commit:
                self.flush_or_keep()

    def _guarded_finish(
        self, call: CallRecord, event: Event
    ) -> Callable[[sqlite3.Connection], None]:
        """The write of a result over the call's ``started`` row, and only over that.

        If another worker settled the row meanwhile (it judged this worker
        gone), the row stays as settled and the result becomes a
        ``call.late_result`` event beside it.
        """
        finished = self._event_entry(event) if event.session_id not in self._lost else None
        update = self._finish_params(call)
        # A result of a session this process holds lands only while it still holds it;
        # one of a session it lost is only ever a late result.
        owner = self._owned.get(call.session_id)
        fence = OWNER_FENCE if owner is not None else ""
        params = (*update, call.session_id, owner) if owner is not None else update
        late_at = event.at + self.clock_offset

        def finish(db: sqlite3.Connection) -> None:
            """UPDATE calls ... WHERE status = 'started' (a guarded result)"""
            row = None
            if finished is not None:
                row = db.execute(
                    "UPDATE calls SET status = 'finished', outcome = ?, block_kind = ?,"
                    " result = ?, is_error = ?, finished_at = ?, artifact = ?, reason = ?,"
                    " finish_seq = ?"
                    f" WHERE call_id = ? AND attempt = ? AND status = 'started'{fence}"
                    " RETURNING call_id",
                    params,
                ).fetchone()
            if row is None:
                found = db.execute(
                    "SELECT outcome FROM calls WHERE call_id = ? AND attempt = ?",
                    (call.call_id, call.attempt),
                ).fetchone()
                if found is not None or finished is None:
                    settled = str(found[0]) if found is not None else "None"
                    db.execute(self._EVENT_SQL, self._late_params(call, settled, late_at))
                    return
                # Its started row was never stored (set aside): the result is the row.
                db.execute(self._CALL_SQL, self._call_params(call))
            assert finished is not None
            db.execute(*finished)

        return finish

    @staticmethod
    def _late_params(call: CallRecord, settled_as: str, at: float) -> tuple[Any, ...]:
        text = call.result or ""
        data = {
            "attempt": call.attempt,
            "outcome": call.outcome,
            "is_error": call.is_error,
            "result": text if len(text) <= _PREVIEW else text[: _PREVIEW - 3] + "...",
            "runner": call.runner,
            "settled_as": settled_as,
        }
        return (call.session_id, call.call_id, "call.late_result", at, json.dumps(data))

    def calls(self, session_id: str) -> list[CallRecord]:
        """Every attempt of every call of a session, in the model's order."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                f"SELECT {self._call_columns} FROM calls WHERE session_id = ?"
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
                    f"SELECT {self._call_columns} FROM calls WHERE status = 'started'"
                ).fetchall()
            else:
                rows = self._db.execute(
                    f"SELECT {self._call_columns} FROM calls WHERE status = 'started'"
                    " AND session_id = ? ORDER BY step, idx, attempt",
                    (session_id,),
                ).fetchall()
        return [_call(r) for r in rows]

    # Events ---------------------------------------------------------------------

    def append_event(self, event: Event) -> int:
        with self._tx() as db:
            return self._insert_event(db, event)

    _RESULT_EVENT_SQL = (
        "INSERT INTO events (session_id, call_id, kind, at, data) SELECT ?, ?, ?, ?, ?"
        " WHERE NOT EXISTS (SELECT 1 FROM calls c WHERE c.call_id = ?"
        " AND c.status = 'finished' AND COALESCE(c.outcome, '') <> ?"
        " AND c.attempt = (SELECT MAX(attempt) FROM calls m WHERE m.call_id = c.call_id))"
    )
    """A ``call.result`` event, written unless the call's last row holds another outcome."""

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
                if event.kind == "call.result" and event.call_id and "outcome" in event.data:
                    # The owner's claim of an outcome: kept out of the log when its
                    # row was settled otherwise meanwhile (call.late_result holds it).
                    params = (
                        *self._event_params(event),
                        event.call_id,
                        str(event.data.get("outcome") or ""),
                    )
                    owner = self._owner(event.session_id)
                    if owner is None:
                        self._defer(self._RESULT_EVENT_SQL, params)
                    else:
                        sql = self._RESULT_EVENT_SQL + OWNER_FENCE
                        self._defer(sql, (*params, event.session_id, owner))
                else:
                    self._defer(*self._event_entry(event))
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

    def set_call_snapshot(self, call_id: str, attempt: int, snapshot: str) -> None:
        """Name the checkpoint taken before a call, written after its row.

        The first file call of a session may run before the workspace's first
        look ends (:mod:`zuno.workspace.checkpoints.early`); its checkpoint exists only then.
        A row that already names one keeps it.
        """
        with self._tx() as db:
            db.execute(
                "UPDATE calls SET snapshot = ? WHERE call_id = ? AND attempt = ?"
                " AND snapshot IS NULL",
                (snapshot, call_id, attempt),
            )

    def add_session_approval(self, session_id: str, fingerprint: str, tool: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO approvals (session_id, fingerprint, tool, at)"
                " VALUES (?, ?, ?, ?)",
                (session_id, fingerprint, tool, self.clock()),
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
        """The session's next message (only while this process still holds the session).

        Raises:
            SessionBusy: This process held the session and lost it (nothing is written).
        """
        return self.append_messages(session_id, [(role, body)])[0]

    def append_messages(
        self, session_id: str, messages: Sequence[tuple[str, dict[str, Any]]]
    ) -> list[int]:
        """The session's next messages, in order, in one transaction; returns their numbers.

        The results of one model step are written together: one commit, not one each.

        Raises:
            SessionBusy: This process held the session and lost it (nothing is written).
        """
        owner = self._owner(session_id)
        with self._tx() as db:
            if owner is not None:
                self._fence(db, session_id, owner)
            row = db.execute(
                "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            first, now = int(row[0]), self.clock()
            for offset, (role, body) in enumerate(messages):
                db.execute(
                    "INSERT INTO messages (session_id, seq, role, body, at) VALUES (?, ?, ?, ?, ?)",
                    (session_id, first + offset, role, json.dumps(body), now),
                )
        return list(range(first, first + len(messages)))

    def messages(self, session_id: str) -> list[tuple[str, dict[str, Any]]]:
        self.flush()
        with self._lock:
            rows = self._db.execute(
                "SELECT role, body FROM messages WHERE session_id = ? ORDER BY seq",
                (session_id,),
            ).fetchall()
        return [(r[0], json.loads(r[1])) for r in rows]
