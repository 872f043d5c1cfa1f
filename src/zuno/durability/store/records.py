"""Rows of the store, as plain typed records."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["CallRecord", "EventRecord", "SessionRecord", "iso"]


def iso(ts: float | None) -> str | None:
    """An epoch timestamp as ISO 8601 in UTC, with microseconds."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="microseconds")


@dataclass(slots=True)
class SessionRecord:
    """A session: one conversation's transcript."""

    session_id: str
    created_at: float
    agent: str
    workspace: str
    parent_call_id: str | None = None
    model: str | None = None
    title: str | None = None
    owner: str | None = None
    """The worker holding or last holding the session (``w1:...``; None before leases)."""
    state: str | None = None
    """``queued``, ``running``, ``done``, ``failed`` or ``idle`` (None in rows made before)."""
    calls: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "created_at": iso(self.created_at),
            "agent": self.agent,
            "workspace": self.workspace,
            "parent_call_id": self.parent_call_id,
            "model": self.model,
            "title": self.title,
            "owner": self.owner,
            "state": self.state,
            "calls": self.calls,
        }


@dataclass(slots=True)
class CallRecord:
    """One attempt of one tool call.

    ``status`` is ``started`` from before the effect can begin until the
    result is written (``finished``). A row left ``started`` is a call whose
    outcome is unknown.
    """

    call_id: str
    session_id: str
    step: int
    index: int
    attempt: int
    tool: str
    arguments: str
    args_hash: str
    effect: str | None
    replay: str | None
    concurrency: str | None
    status: str
    outcome: str | None = None
    block_kind: str | None = None
    result: str | None = None
    is_error: bool = False
    started_at: float | None = None
    finished_at: float | None = None
    artifact: str | None = None
    model_call_id: str | None = None
    runner: str | None = None
    """The worker running the call (``w1:...``, see :mod:`zuno.durability.workers`; ``pid:start`` in
    older rows), to tell a live run from a dead one."""
    reason: str | None = None
    """For an ``error`` or ``uncertain`` outcome: why, in one line (for recovery notices)."""
    snapshot: str | None = None
    """The checkpoint of the workspace taken just before a side-effecting call ran
    (:mod:`zuno.workspace.checkpoints.store`), or None when none was taken."""
    mode: str | None = None
    """The session's permission mode when the call was admitted (``strict``, ``plan``, ...)."""
    start_seq: int | None = None
    """Where the attempt started in its session's order (:func:`zuno.contract.calls.call_order`)."""
    finish_seq: int | None = None
    """Where it finished in the same order; rules that ask "after" compare these, not times."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "session_id": self.session_id,
            "step": self.step,
            "index": self.index,
            "attempt": self.attempt,
            "tool": self.tool,
            "arguments": self.arguments,
            "effect": self.effect,
            "replay": self.replay,
            "concurrency": self.concurrency,
            "status": self.status,
            "outcome": self.outcome,
            "block_kind": self.block_kind,
            "result": self.result,
            "is_error": self.is_error,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "artifact": self.artifact,
            "model_call_id": self.model_call_id,
            "reason": self.reason,
            "snapshot": self.snapshot,
            "mode": self.mode,
        }


@dataclass(slots=True)
class EventRecord:
    """A persisted event."""

    seq: int
    session_id: str
    call_id: str | None
    kind: str
    at: float
    data: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "call_id": self.call_id,
            "at": iso(self.at),
            "data": self.data,
        }
