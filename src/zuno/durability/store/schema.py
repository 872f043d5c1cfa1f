"""The SQL schema of the store (portable between SQLite and PostgreSQL).

``meta.schema_version`` says which layout a store has. A Zuno opens stores of
its own version or older (a writing command upgrades them in place, by adding,
never rebuilding) and refuses newer ones: an older Zuno never changes a layout
it does not know. Bump :data:`SCHEMA_VERSION` when a change would break an
older Zuno reading or writing the store.
"""

from __future__ import annotations

__all__ = [
    "ADDED_COLUMNS",
    "CALL_FIELDS",
    "CORE_TABLES",
    "INDEXES",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SESSION_FIELDS",
    "newer_schema_message",
]

SCHEMA_VERSION = 2
"""2: workers (leases), session ownership, ``w1:`` runners. A Zuno of version 1 would read
a ``w1:`` runner as a dead process and settle the live calls of every worker."""

CORE_TABLES = ("meta", "sessions", "steps", "calls", "events", "approvals", "messages")
"""The tables of the store itself (modules keep their own beside them)."""

CALL_FIELDS = (
    "call_id",
    "session_id",
    "step",
    "idx",
    "attempt",
    "tool",
    "arguments",
    "args_hash",
    "effect",
    "replay",
    "concurrency",
    "status",
    "outcome",
    "block_kind",
    "result",
    "is_error",
    "started_at",
    "finished_at",
    "artifact",
    "model_call_id",
    "runner",
    "reason",
    "snapshot",
    "mode",
    "start_seq",
    "finish_seq",
)
"""The columns of ``calls``, in the order records are read."""

SESSION_FIELDS = (
    "session_id",
    "created_at",
    "agent",
    "workspace",
    "parent_call_id",
    "model",
    "title",
    "owner",
    "state",
)
"""The columns of ``sessions`` a :class:`~zuno.durability.store.records.SessionRecord` is read
from.
"""

ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("calls", "runner", "TEXT"),
    ("calls", "reason", "TEXT"),
    ("calls", "snapshot", "TEXT"),
    ("calls", "mode", "TEXT"),
    ("calls", "start_seq", "BIGINT"),
    ("calls", "finish_seq", "BIGINT"),
    ("sessions", "owner", "TEXT"),
    ("sessions", "state", "TEXT"),
    ("sessions", "prompt", "TEXT"),
    ("sessions", "options", "TEXT"),
    ("sessions", "updated_at", "DOUBLE PRECISION"),
)
"""Columns added after their table was first released: (table, column, type).

A writing open adds the missing ones to an older store (never a rebuild);
both stores read this one list.
"""


def newer_schema_message(where: str, found: int) -> str:
    """One line: the store's version, the one this Zuno supports, what to do."""
    # importlib.metadata costs more than the rest of the store's import: only this
    # rare message needs it.
    from importlib.metadata import PackageNotFoundError, version

    try:
        zuno = f"Zuno {version('zuno')}"
    except PackageNotFoundError:
        zuno = "this Zuno"
    return (
        f"the store {where} has schema version {found}, made by a newer Zuno; {zuno} "
        f"supports version {SCHEMA_VERSION} and does not change it: upgrade Zuno "
        "(pip install -U zuno), or give --db (or ZUNO_DB) another store"
    )


SCHEMA = [
    """CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS sessions (
        session_id TEXT PRIMARY KEY,
        created_at DOUBLE PRECISION NOT NULL,
        agent TEXT NOT NULL,
        workspace TEXT NOT NULL,
        parent_call_id TEXT,
        model TEXT,
        title TEXT,
        owner TEXT,
        state TEXT,
        prompt TEXT,
        options TEXT,
        updated_at DOUBLE PRECISION
    )""",
    """CREATE TABLE IF NOT EXISTS steps (
        session_id TEXT NOT NULL,
        step INTEGER NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (session_id, step)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS calls (
        call_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        session_id TEXT NOT NULL,
        step INTEGER NOT NULL,
        idx INTEGER NOT NULL,
        tool TEXT NOT NULL,
        arguments TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        effect TEXT,
        replay TEXT,
        concurrency TEXT,
        status TEXT NOT NULL,
        outcome TEXT,
        block_kind TEXT,
        result TEXT,
        is_error INTEGER NOT NULL DEFAULT 0,
        started_at DOUBLE PRECISION,
        finished_at DOUBLE PRECISION,
        artifact TEXT,
        model_call_id TEXT,
        runner TEXT,
        reason TEXT,
        snapshot TEXT,
        mode TEXT,
        start_seq BIGINT,
        finish_seq BIGINT,
        PRIMARY KEY (call_id, attempt)
    )""",
    """CREATE INDEX IF NOT EXISTS calls_by_session ON calls (session_id, step, idx, attempt)""",
    # A full index on status cost a page write on every start and finish; the
    # partial calls_unsettled (see INDEXES) holds only the rows still started.
    """DROP INDEX IF EXISTS calls_started""",
    # No AUTOINCREMENT: events are never deleted, so rowids only grow anyway,
    # and AUTOINCREMENT would write its sqlite_sequence page on every commit.
    """CREATE TABLE IF NOT EXISTS events (
        seq INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        call_id TEXT,
        kind TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        data TEXT NOT NULL
    )""",
    """CREATE INDEX IF NOT EXISTS events_by_session ON events (session_id, seq)""",
    """CREATE TABLE IF NOT EXISTS approvals (
        session_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        tool TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (session_id, fingerprint)
    )""",
    """CREATE TABLE IF NOT EXISTS messages (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        body TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (session_id, seq)
    )""",
    # Leases (zuno.durability.workers): times are the database's clock, zuno_now().
    """CREATE TABLE IF NOT EXISTS workers (
        worker_id TEXT PRIMARY KEY,
        host TEXT,
        pid INTEGER,
        started_at DOUBLE PRECISION,
        heartbeat_at DOUBLE PRECISION,
        expires_at DOUBLE PRECISION
    )""",
]

INDEXES = [
    # Recovery reads only the few rows that matter, however long the session:
    # the calls still started (a handful at any time),
    """CREATE INDEX IF NOT EXISTS calls_unsettled ON calls (session_id, step, idx, attempt)
        WHERE status = 'started'""",
    # the failed or uncertain Never calls that may have changed state, newest last (in
    # the session's order, see zuno.contract.calls.call_order: never by the clock of a host),
    """DROP INDEX IF EXISTS calls_failed_never""",
    """CREATE INDEX IF NOT EXISTS calls_failed_never_seq ON calls (session_id, finish_seq)
        WHERE replay = 'never' AND outcome IN ('error', 'uncertain')
        AND effect IN ('side_effecting', 'delegating')""",
    # and the inspections, newest first (the one that follows the failure, if any).
    """DROP INDEX IF EXISTS events_inspected""",
    """CREATE INDEX IF NOT EXISTS events_inspected_seq ON events (session_id, seq)
        WHERE kind = 'call.inspected'""",
    # The fleet's queue: sessions waiting or running, oldest first.
    """CREATE INDEX IF NOT EXISTS sessions_active ON sessions (created_at)
        WHERE state IN ('queued', 'running')""",
    # Short ids (`zuno show ses_1a2b`) are a range on the id in byte order; the
    # primary key serves it on SQLite, this index on PostgreSQL (any collation).
    """/*pg: CREATE INDEX IF NOT EXISTS sessions_by_id_bytes ON sessions
        (session_id COLLATE "C") */""",
]
"""Indexes created after :data:`ADDED_COLUMNS` are in place (some use added columns)."""
