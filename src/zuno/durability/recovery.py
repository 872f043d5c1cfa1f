"""Recovery: what the runtime knows about calls whose outcome is unknown.

Everything here is a query over the store, never a reading of transcript
prose (invariant 9).

- :func:`settle_interrupted` turns rows left ``started`` by a worker that is
  gone (its lease expired, or its process is dead on this machine, see
  :mod:`zuno.durability.workers`) into outcomes: ``uncertain`` for a Never call (its
  effect may have happened; it is never run again), ``error`` for a
  read-only Safe call. A row is settled only while it is still ``started``;
  if its worker comes back with a result, that goes beside it as a
  ``call.late_result`` event.
- :func:`inspection_block` says why a side-effecting or delegating call must
  wait: after a Never call ended in ``error`` or ``uncertain``, an inspection
  (a call that observes the workspace or processes, see
  :attr:`~zuno.core.declarations.Declaration.inspects`) has to complete first, so
  the agent looks at the real state before changing it again. The dispatcher
  marks each completed inspection with a ``call.inspected`` event; the rule
  is a query over those events and the call rows.
- :func:`pending_notice` builds the notice of the next recovery turn: its
  attempt number and, for each failed or uncertain Never call not yet
  reported, the call id, tool, a short form of the arguments, the attempt,
  when it started and why its outcome is unknown. :func:`issue_notice`
  records that the notice was given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from zuno.durability.store import Store
from zuno.durability.store.records import iso
from zuno.durability.workers import runner_settleable

__all__ = [
    "INSPECTED",
    "RecoveryItem",
    "RecoveryNotice",
    "inspection_block",
    "issue_notice",
    "pending_notice",
    "prefetch_inspection",
    "settle_interrupted",
]

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS recovery_notices (
        session_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        call_ids TEXT NOT NULL,
        text TEXT NOT NULL,
        PRIMARY KEY (session_id, attempt)
    )""",
    """CREATE TABLE IF NOT EXISTS recovery_items (
        session_id TEXT NOT NULL,
        call_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        PRIMARY KEY (session_id, call_id, attempt)
    )""",
]

INTERRUPTED = (
    "The runtime stopped while this call was running (the process was killed or crashed). "
    "Its effect may or may not have happened; it will not be run again automatically."
)
INTERRUPTED_READ_ONLY = (
    "The runtime stopped while this read-only call was running; nothing was changed."
)


# A failed question (user-mediated) or read changed nothing: only these effects leave
# state that must be looked at again before the next change.
_MAY_CHANGE_STATE = "('side_effecting', 'delegating')"


def ensure_schema(store: Store) -> None:
    """Create the recovery tables (idempotent; once per store)."""
    if not getattr(store, "_recovery_schema", False):
        store.ensure_schema(_SCHEMA)
        store._recovery_schema = True  # type: ignore[attr-defined]


# A settled call ends after every place its session's order has handed out so far
# (see SQLiteStore.next_order): its worker is gone, so whatever inspects after
# this comes later.
_AFTER_EVERY_PLACE = (
    "(SELECT COALESCE(MAX(p), 0) + 1 FROM (SELECT MAX(start_seq) AS p FROM calls"
    " WHERE session_id = ? UNION ALL SELECT MAX(finish_seq) FROM calls WHERE session_id = ?) o)"
)


def settle_interrupted(store: Store, session_id: str, *, gone: str | None = None) -> list[str]:
    """Give an outcome to the calls a gone worker left ``started``; returns their ids.

    ``gone``: a worker id known to run none of them, though its lease may be
    alive (this very worker, taking back a session it had to let go of during an
    outage: what it was running then was killed).
    """
    rows = store.query(
        "SELECT call_id, attempt, replay, effect, runner FROM calls"
        " WHERE session_id = ? AND status = 'started'",
        (session_id,),
    )
    verdicts: dict[str | None, bool] = {}
    for *_, runner in rows:
        if runner not in verdicts:
            verdicts[runner] = runner == gone or runner_settleable(store, runner)
    stale = [r for r in rows if verdicts[r[4]]]  # a live worker is running the others
    settled: list[str] = []
    if not stale:
        return settled
    with store.transaction() as db:
        for call_id, attempt, replay, effect, runner in stale:
            harmless = replay == "safe" and effect == "read_only"
            changed = db.execute(
                "UPDATE calls SET status = 'finished', outcome = ?, result = ?, is_error = 1,"
                f" finished_at = zuno_now(), reason = ?, finish_seq = {_AFTER_EVERY_PLACE}"
                " WHERE call_id = ? AND attempt = ? AND status = 'started' RETURNING call_id",
                (
                    "error" if harmless else "uncertain",
                    INTERRUPTED_READ_ONLY if harmless else INTERRUPTED,
                    f"the runtime stopped while this call was running (worker "
                    f"{runner or 'unknown'}), before its result was stored",
                    session_id,
                    session_id,
                    call_id,
                    attempt,
                ),
            ).fetchone()
            if changed is None:
                continue  # its worker stored the result meanwhile
            db.execute(
                "INSERT INTO events (session_id, call_id, kind, at, data)"
                " VALUES (?, ?, ?, zuno_now(), ?)",
                (
                    session_id,
                    call_id,
                    "call.interrupted",
                    json.dumps(
                        {
                            "attempt": attempt,
                            "outcome": "error" if harmless else "uncertain",
                            "runner": runner,
                        }
                    ),
                ),
            )
            settled.append(call_id)
    return settled


INSPECTED = "call.inspected"
"""The event kind marking a call that completed an inspection of the real state."""


_INSPECTION_SQL = (
    "SELECT f.call_id, f.tool, f.outcome, f.finish_seq,"
    " (SELECT 1 FROM events e JOIN calls r ON r.call_id = e.call_id"
    f"   WHERE e.session_id = f.session_id AND e.kind = '{INSPECTED}'"
    # A failed inspection counts only when it observed an absence (the dispatcher
    # writes call.inspected for nothing else); its row then says error.
    "   AND r.outcome IN ('ok', 'error') AND (r.start_seq > f.finish_seq"
    # A row written before calls had places (an older Zuno): its times, as then.
    "   OR ((r.start_seq IS NULL OR f.finish_seq IS NULL) AND r.started_at > f.finished_at))"
    # Newest first: the latest inspection is the one that follows the failure, if any.
    "   ORDER BY e.seq DESC LIMIT 1)"
    " FROM calls f"
    " WHERE f.session_id = ? AND f.replay = 'never' AND f.outcome IN ('error', 'uncertain')"
    f" AND f.effect IN {_MAY_CHANGE_STATE}"
    # Rows without a place came before the first with one (written before the upgrade).
    " ORDER BY COALESCE(f.finish_seq, 0) DESC, f.finished_at DESC LIMIT 1"
)
"""The newest failure that may have changed state, and whether an inspection followed it.

"Newest" and "followed" are places in the session's order (``finish_seq``,
``start_seq``; see :meth:`~zuno.durability.store.sqlite.SQLiteStore.next_order`), never
times: hosts' clocks differ and jump, the order does not.
"""


def prefetch_inspection(store: Store, session_id: str) -> None:
    """Let the inspection rule's query ride with the opening of the next step.

    On a store where each read is a round trip (PostgreSQL), the step's opening
    carries it and :func:`inspection_block` reads the answer without asking
    again; elsewhere this does nothing.
    """
    store.prefetch(_INSPECTION_SQL, (session_id,))


def inspection_block(store: Store, session_id: str) -> str | None:
    """Why a side-effecting or delegating call must wait for an inspection, or None.

    A failure counts as inspected once an inspection *started* after it ended
    in the session's order: one that overlapped it may have seen the state
    from before. Only the latest failure matters (an inspection after it is
    after every earlier one), so this is one statement: the newest failure
    (``calls_failed_never_seq``), then the session's inspections
    (``events_inspected_seq``, newest first), each checked by its row's key.
    """
    rows = store.query(_INSPECTION_SQL, (session_id,))
    if not rows:
        return None
    call_id, tool, outcome, _, inspected = rows[0]
    if inspected is not None:
        return None
    what = "may or may not have taken effect" if outcome == "uncertain" else "failed"
    return (
        f"the earlier {tool} call {call_id} {what}, and nothing has inspected the real state "
        "since. First see what actually happened with a read-only call that looks at it: "
        "read (the files it touched), grep, glob, lsp, job or bg output (todo_get, skill and "
        "web tools do not count); then changes are allowed again"
    )


@dataclass(frozen=True, slots=True)
class RecoveryItem:
    """One call whose outcome the model must not assume."""

    call_id: str
    tool: str
    arguments: str
    attempt: int
    started_at: float | None
    outcome: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "attempt": self.attempt,
            "started_at": iso(self.started_at),
            "outcome": self.outcome,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class RecoveryNotice:
    """What a recovery turn tells the model, built from rows."""

    session_id: str
    attempt: int
    items: tuple[RecoveryItem, ...]

    @property
    def text(self) -> str:
        lines = [
            f"Recovery notice (recovery attempt {self.attempt} of session {self.session_id}).",
            "These calls did not complete normally. Zuno will not run them again. Do not assume "
            "what they did: inspect the authoritative state (files, processes, services) with "
            "read-only calls before you change anything again.",
        ]
        for item in self.items:
            lines.append(
                f"- call {item.call_id}: {item.tool} {item.arguments} (attempt {item.attempt}, "
                f"started {iso(item.started_at) or 'never'}): {item.outcome}: {item.reason}"
            )
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "attempt": self.attempt,
            "items": [i.as_dict() for i in self.items],
            "text": self.text,
        }


def _short(arguments: str, limit: int = 120) -> str:
    text = " ".join(arguments.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reason(outcome: str, reason: str | None, result: str | None) -> str:
    first = reason or ((result or "").strip().splitlines() or [""])[0]
    if outcome == "uncertain":
        return first or "its effect may or may not have happened"
    return first or "it failed"


def pending_notice(store: Store, session_id: str) -> RecoveryNotice | None:
    """The notice of the next recovery turn, or None when nothing needs recovering."""
    ensure_schema(store)
    # Through the failures' index (calls_failed_never_seq), sorted here: ordered by
    # (step, idx) in SQL, the planner would walk every call of the session instead.
    found = store.query(
        "SELECT c.call_id, c.tool, c.arguments, c.attempt, c.started_at, c.outcome, c.reason,"
        " c.result, c.step, c.idx"
        " FROM calls c WHERE c.session_id = ? AND c.replay = 'never'"
        f" AND c.outcome IN ('error', 'uncertain') AND c.effect IN {_MAY_CHANGE_STATE}"
        " AND NOT EXISTS (SELECT 1 FROM recovery_items i WHERE i.session_id = c.session_id"
        "   AND i.call_id = c.call_id AND i.attempt = c.attempt)",
        (session_id,),
    )
    if not found:
        return None
    rows = sorted(found, key=lambda r: (r[8], r[9], r[3]))
    (count,) = store.query(
        "SELECT COUNT(*) FROM recovery_notices WHERE session_id = ?", (session_id,)
    )[0]
    items = tuple(
        RecoveryItem(r[0], r[1], _short(r[2]), r[3], r[4], r[5], _reason(r[5], r[6], r[7]))
        for r in rows
    )
    return RecoveryNotice(session_id, int(count) + 1, items)


def issue_notice(store: Store, notice: RecoveryNotice) -> None:
    """Record that a recovery turn received this notice."""
    ensure_schema(store)
    with store.transaction() as db:
        store.check_owner(db, notice.session_id)  # only the session's owner tells its model
        db.execute(
            "INSERT INTO recovery_notices (session_id, attempt, created_at, call_ids, text)"
            " VALUES (?, ?, zuno_now(), ?, ?)",
            (
                notice.session_id,
                notice.attempt,
                json.dumps([i.call_id for i in notice.items]),
                notice.text,
            ),
        )
        for item in notice.items:
            db.execute(
                "INSERT OR IGNORE INTO recovery_items (session_id, call_id, attempt)"
                " VALUES (?, ?, ?)",
                (notice.session_id, item.call_id, item.attempt),
            )


def last_notice(store: Store, session_id: str) -> str | None:
    """The text of the last notice given in a session."""
    ensure_schema(store)
    rows = store.query(
        "SELECT text FROM recovery_notices WHERE session_id = ? ORDER BY attempt DESC LIMIT 1",
        (session_id,),
    )
    return rows[0][0] if rows else None
