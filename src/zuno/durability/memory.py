"""Memories: facts and preferences an agent proposes and a person accepts.

An agent proposes a memory with ``memory_propose`` (when ``memory.enabled``).
Nothing is remembered until a person reviews it: ``zuno memory list``, then
``zuno memory accept ID`` or ``zuno memory reject ID``. Accepted memories are
given to agents when a session starts (:func:`accepted_memories_text`).

A memory has a scope: ``workspace`` memories belong to one workspace folder,
``user`` memories follow the person into every workspace.

The ``memories`` table lives in the runtime's store and is created on first use.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from zuno.durability.store import Store

__all__ = [
    "MAX_MEMORY_CHARS",
    "MEMORY_SCHEMA",
    "Memory",
    "MemoryScope",
    "MemoryStatus",
    "UnknownMemory",
    "accepted_memories",
    "accepted_memories_text",
    "decide_memory",
    "get_memory",
    "list_memories",
    "propose_memory",
]

MAX_MEMORY_CHARS = 1000
"""The longest memory text a proposal may carry."""
DEFAULT_PROMPT_CHARS = 8000
"""How much accepted-memory text a session start receives at most."""

MemoryScope = Literal["workspace", "user"]
MemoryStatus = Literal["proposed", "accepted", "rejected"]

MEMORY_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS memories ("
    " memory_id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " text TEXT NOT NULL,"
    " scope TEXT NOT NULL CHECK (scope IN ('workspace', 'user')),"
    " workspace TEXT,"
    " status TEXT NOT NULL CHECK (status IN ('proposed', 'accepted', 'rejected')),"
    " proposed_by TEXT,"
    " proposed_at REAL NOT NULL,"
    " decided_at REAL)",
    "CREATE INDEX IF NOT EXISTS memories_by_status ON memories (status, scope, workspace)",
)
"""The memories table: ids are small integers so a person can type them."""

_COLUMNS = "memory_id, text, scope, workspace, status, proposed_by, proposed_at, decided_at"

_ready: weakref.WeakSet[Store] = weakref.WeakSet()


class UnknownMemory(LookupError):
    """No memory has that id."""


@dataclass(frozen=True, slots=True)
class Memory:
    """One proposed, accepted or rejected memory.

    Attributes:
        memory_id: Its number, as typed in ``zuno memory accept ID``.
        text: What to remember.
        scope: ``workspace`` (one folder) or ``user`` (everywhere).
        workspace: The workspace folder, for the workspace scope.
        status: ``proposed`` until a person accepts or rejects it.
        proposed_by: The session that proposed it.
        proposed_at: When it was proposed (seconds since the epoch).
        decided_at: When a person last accepted or rejected it.
    """

    memory_id: int
    text: str
    scope: MemoryScope
    workspace: str | None
    status: MemoryStatus
    proposed_by: str | None
    proposed_at: float
    decided_at: float | None

    def as_dict(self) -> dict[str, Any]:
        """The memory as JSON-ready data."""
        return {
            "id": self.memory_id,
            "text": self.text,
            "scope": self.scope,
            "workspace": self.workspace,
            "status": self.status,
            "proposed_by": self.proposed_by,
            "proposed_at": self.proposed_at,
            "decided_at": self.decided_at,
        }


def _ensure(store: Store) -> None:
    if store not in _ready:
        store.ensure_schema(MEMORY_SCHEMA)
        _ready.add(store)


def _memory(row: tuple[Any, ...]) -> Memory:
    return Memory(int(row[0]), row[1], row[2], row[3], row[4], row[5], row[6], row[7])


def _folder(workspace: Path | str) -> str:
    return str(Path(workspace).resolve())


def propose_memory(
    store: Store,
    text: str,
    scope: MemoryScope,
    workspace: Path | str,
    session_id: str | None = None,
) -> tuple[Memory, bool]:
    """Record a proposal waiting for a person.

    The same text in the same scope (and workspace) that is already proposed
    or accepted is not proposed twice.

    Returns:
        The memory, and whether it is a new proposal (False: an existing one).

    Raises:
        ValueError: When the text is blank or longer than :data:`MAX_MEMORY_CHARS`.
    """
    text = text.strip()
    if not text:
        raise ValueError("a memory needs text")
    if len(text) > MAX_MEMORY_CHARS:
        raise ValueError(f"a memory is at most {MAX_MEMORY_CHARS} characters, got {len(text)}")
    _ensure(store)
    folder = _folder(workspace) if scope == "workspace" else None
    with store.transaction() as db:
        row = db.execute(
            f"SELECT {_COLUMNS} FROM memories WHERE text = ? AND scope = ?"
            " AND workspace IS ? AND status IN ('proposed', 'accepted')"
            " ORDER BY memory_id LIMIT 1",
            (text, scope, folder),
        ).fetchone()
        if row is not None:
            return _memory(tuple(row)), False
        row = db.execute(
            "INSERT INTO memories (text, scope, workspace, status, proposed_by, proposed_at)"
            f" VALUES (?, ?, ?, 'proposed', ?, ?) RETURNING {_COLUMNS}",
            (text, scope, folder, session_id, time.time()),
        ).fetchone()
    return _memory(tuple(row)), True


def get_memory(store: Store, memory_id: int) -> Memory:
    """The memory with that id.

    Raises:
        UnknownMemory: When there is none.
    """
    _ensure(store)
    rows = store.query(f"SELECT {_COLUMNS} FROM memories WHERE memory_id = ?", (memory_id,))
    if not rows:
        raise UnknownMemory(f"no memory with id {memory_id}; `zuno memory list` shows them")
    return _memory(rows[0])


def list_memories(
    store: Store,
    *,
    status: MemoryStatus | None = None,
    workspace: Path | str | None = None,
) -> list[Memory]:
    """Memories, oldest first, optionally of one status.

    Args:
        store: The store holding them.
        status: Only memories with this status.
        workspace: Only the user-scope memories and those of this workspace.
    """
    # A listing is a read: it creates no table in a store that never had one.
    if store not in _ready and not store.has_table("memories"):
        return []
    where: list[str] = []
    params: list[Any] = []
    if status is not None:
        where.append("status = ?")
        params.append(status)
    if workspace is not None:
        where.append("(scope = 'user' OR workspace = ?)")
        params.append(_folder(workspace))
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    rows = store.query(f"SELECT {_COLUMNS} FROM memories{clause} ORDER BY memory_id", tuple(params))
    return [_memory(r) for r in rows]


def decide_memory(store: Store, memory_id: int, status: MemoryStatus) -> tuple[Memory, str]:
    """A person's decision: accept or reject a memory (a later decision replaces it).

    Returns:
        The memory as now stored, and its status before.

    Raises:
        UnknownMemory: When no memory has that id.
        ValueError: When ``status`` is not ``accepted`` or ``rejected``.
    """
    if status not in ("accepted", "rejected"):
        raise ValueError(f"a decision is accepted or rejected, not {status!r}")
    _ensure(store)
    with store.transaction() as db:
        before = db.execute(
            "SELECT status FROM memories WHERE memory_id = ?", (memory_id,)
        ).fetchone()
        if before is None:
            raise UnknownMemory(f"no memory with id {memory_id}; `zuno memory list` shows them")
        row = db.execute(
            f"UPDATE memories SET status = ?, decided_at = ? WHERE memory_id = ?"
            f" RETURNING {_COLUMNS}",
            (status, time.time(), memory_id),
        ).fetchone()
    return _memory(tuple(row)), str(before[0])


def accepted_memories(store: Store, workspace: Path | str) -> list[Memory]:
    """The accepted memories that apply in ``workspace``: user scope first, then its own."""
    memories = list_memories(store, status="accepted", workspace=workspace)
    return sorted(memories, key=lambda m: (m.scope != "user", m.memory_id))


def accepted_memories_text(
    store: Store, workspace: Path | str, max_chars: int = DEFAULT_PROMPT_CHARS
) -> str:
    """Accepted memories as text for an agent's system prompt at the start of a session.

    Returns an empty string when there are none. Past ``max_chars`` the newest
    memories are left out and the text says how many.
    """
    memories = accepted_memories(store, workspace)
    if not memories:
        return ""
    head = (
        "Memories the user accepted (facts and preferences from earlier sessions; "
        "follow them unless the user now says otherwise):"
    )
    lines = [head]
    used = len(head)
    left_out = 0
    for memory in memories:
        where = "everywhere" if memory.scope == "user" else "this workspace"
        line = f"- [{where}] {' '.join(memory.text.split())}"
        if used + len(line) + 1 > max_chars:
            left_out += 1
            continue
        lines.append(line)
        used += len(line) + 1
    if left_out:
        lines.append(f"({left_out} more accepted memories left out for length.)")
    return "\n".join(lines)
