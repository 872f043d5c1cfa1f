"""Sessions in the store: their rows, their leases, and the sessions they started.

A session is leased by one worker at a time: :meth:`SessionStore.acquire_session`
takes it when it is free, already the worker's own, or its owner's lease
expired (judged by :func:`zuno.durability.workers.settleable_in`), and
:meth:`SessionStore.release_session` gives it up. Times are the database's clock.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from zuno.durability.store.core import StoreCore
from zuno.durability.store.errors import SessionBusy, StoreError
from zuno.durability.store.records import SessionRecord, iso
from zuno.durability.workers import WorkerIdentity, settleable_in

__all__ = ["SessionStore"]


def _next_text(prefix: str) -> str | None:
    """The least text greater than every text starting with ``prefix`` (code point order)."""
    while prefix:
        last = ord(prefix[-1])
        if last < 0x10FFFF:
            following = last + 1 if not 0xD800 <= last + 1 <= 0xDFFF else 0xE000
            return prefix[:-1] + chr(following)
        prefix = prefix[:-1]
    return None


def _busy_message(
    session_id: str,
    owner: str,
    host: str | None,
    pid: int | None,
    since: float | None,
    expires_at: float | None,
) -> str:
    """Who holds a session, since when, until when, and what to do."""
    who = WorkerIdentity.parse(owner)
    name = who.short if who is not None else owner
    where = f" on host {host}" if host else ""
    process = f", pid {pid}" if pid is not None else (f", pid {who.pid}" if who else "")
    held = f" since {iso(since)}" if since is not None else ""
    until = (
        f"; its lease expires at {iso(expires_at)} unless it is renewed"
        if expires_at is not None
        else ""
    )
    return (
        f"session {session_id} is in use by worker {name}{where}{process}{held}{until}: "
        "use --wait SECONDS, or try again after that"
    )


class SessionStore(StoreCore):
    """The store's sessions: created, listed, leased and given up."""

    def create_session(
        self,
        session_id: str,
        agent: str,
        workspace: str,
        parent_call_id: str | None = None,
        model: str | None = None,
        title: str | None = None,
        *,
        owner: str | None = None,
    ) -> SessionRecord:
        """A new session; with ``owner`` (a worker id) it is created leased to that worker."""
        state = "running" if owner is not None else None
        record = SessionRecord(
            session_id, self.clock(), agent, workspace, parent_call_id, model, title, owner, state
        )
        with self._tx() as db:
            db.execute(
                "INSERT INTO sessions (session_id, created_at, agent, workspace, parent_call_id,"
                " model, title, owner, state, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, zuno_now())",
                (
                    session_id,
                    record.created_at,
                    agent,
                    workspace,
                    parent_call_id,
                    model,
                    title,
                    owner,
                    state,
                ),
            )
        return record

    def _session_select(self) -> str:
        return (
            f"SELECT {self._session_columns},"
            " (SELECT COUNT(DISTINCT call_id) FROM calls c WHERE c.session_id = s.session_id)"
            " FROM sessions s"
        )

    @staticmethod
    def _session(row: Sequence[Any]) -> SessionRecord:
        *fields, calls = tuple(row)
        return SessionRecord(*fields, calls=calls)

    def get_session(self, session_id: str) -> SessionRecord | None:
        self.flush()
        with self._lock:
            row = self._db.execute(
                self._session_select() + " WHERE s.session_id = ?", (session_id,)
            ).fetchone()
        return self._session(row) if row else None

    def find_sessions(self, prefix: str) -> list[str]:
        """Session ids starting with ``prefix`` (so people can type a short id).

        A range on the id in code point order (the primary key on SQLite, the
        ``COLLATE "C"`` index on PostgreSQL), not a scan.
        """
        self.flush()
        # Ids hold neither; earlier versions read them as LIKE wildcards and dropped them.
        prefix = prefix.replace("%", "").replace("\\", "")
        upper = _next_text(prefix)
        sql = 'SELECT session_id FROM sessions WHERE session_id /*pg: COLLATE "C"*/ >= ?'
        params: tuple[Any, ...] = (prefix,)
        if upper is not None:
            sql += ' AND session_id /*pg: COLLATE "C"*/ < ?'
            params += (upper,)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY created_at", params).fetchall()
        return [r[0] for r in rows]

    def list_sessions(self, limit: int = 1000) -> list[SessionRecord]:
        """Sessions, newest first."""
        self.flush()
        with self._lock:
            rows = self._db.execute(
                self._session_select() + " ORDER BY s.created_at DESC, s.rowid DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [self._session(r) for r in rows]

    def acquire_session(self, session_id: str, worker_id: str) -> SessionRecord:
        """Lease the session to ``worker_id``: free, already its own, or its owner's lease expired.

        Raises:
            SessionBusy: Another worker holds it and is alive (its lease has not
                expired, or its process runs on this machine).
            StoreError: There is no such session.
        """
        with self._tx() as db:
            row = db.execute(
                "SELECT s.owner, s.state, s.updated_at, w.host, w.pid, w.expires_at"
                " FROM sessions s LEFT JOIN workers w ON w.worker_id = s.owner"
                " WHERE s.session_id = ? /*pg: FOR UPDATE OF s*/",
                (session_id,),
            ).fetchone()
            if row is None:
                raise StoreError(f"no session {session_id!r}: `zuno sessions` lists them")
            owner, state, since, host, pid, expires_at = tuple(row)
            if (
                owner is not None
                and owner != worker_id
                and state == "running"
                and not settleable_in(db, owner, single_host=self.single_host)
            ):
                raise SessionBusy(
                    _busy_message(session_id, owner, host, pid, since, expires_at),
                    session_id,
                    owner,
                    expires_at,
                )
            db.execute(
                "UPDATE sessions SET owner = ?, state = 'running', updated_at = zuno_now()"
                " WHERE session_id = ?",
                (worker_id, session_id),
            )
        with self._lock:
            self._lost.pop(session_id, None)
            self._owned[session_id] = worker_id
            self._orders.pop(session_id, None)  # another holder may have gone on meanwhile
        record = self.get_session(session_id)
        assert record is not None
        return record

    def release_session(self, session_id: str, worker_id: str, state: str = "idle") -> bool:
        """Give the session up (``state``: idle, done, failed, queued); False if it was not ours.

        ``idle`` (a runtime closing) only ends a ``running`` lease: a session a
        worker already marked ``done`` or ``failed`` keeps that state.
        """
        if session_id in self._lost:
            return False  # its lease lapsed: another worker may hold it by now
        with self._tx() as db:
            ending = self._answered_state(db, session_id) if state == "idle" else state
            row = db.execute(
                "UPDATE sessions SET state = ?, updated_at = zuno_now()"
                " WHERE session_id = ? AND owner = ? AND (state = 'running' OR ? <> 'idle')"
                " RETURNING session_id",
                (ending, session_id, worker_id, state),
            ).fetchone()
        with self._lock:
            if self._owned.get(session_id) == worker_id:
                del self._owned[session_id]
        return row is not None

    @staticmethod
    def _answered_state(db: sqlite3.Connection, session_id: str) -> str:
        """``done`` for a submitted session whose model gave its answer, else ``idle``.

        A person may finish a submitted session with ``zuno resume``: once answered,
        it is done for the fleet too, not an idle interactive session.
        """
        row = db.execute(
            "SELECT s.prompt IS NOT NULL, m.role, m.body FROM sessions s"
            " LEFT JOIN messages m ON m.session_id = s.session_id AND m.seq ="
            " (SELECT MAX(seq) FROM messages WHERE session_id = s.session_id)"
            " WHERE s.session_id = ?",
            (session_id,),
        ).fetchone()
        if row is None or not row[0] or row[1] != "assistant":
            return "idle"
        try:
            body = json.loads(row[2])
        except (TypeError, ValueError):
            return "idle"
        return "idle" if isinstance(body, dict) and body.get("tool_calls") else "done"  # pyright: ignore[reportUnknownMemberType]

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
