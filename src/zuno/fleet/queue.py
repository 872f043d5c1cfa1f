"""The fleet's queue: submitting a session, and claiming one (see :mod:`zuno.fleet.worker`).

A claim is one transaction: the oldest claimable session is chosen and owned
before any other worker can choose it (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL, the database's write lock on SQLite). Claimable: queued, or
running under a lease that expired on the database's clock. On one machine, a
running session whose owner's process is gone (same machine, boot and PID
namespace) has that lease expired first, so it is claimed at once. A worker
that had to let go of its session in a store outage takes it back first
(:func:`reclaim_own`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zuno.contract.calls import new_id
from zuno.durability.session_options import parse_options
from zuno.durability.workers import WorkerIdentity, proc_is_ours, this_worker

if TYPE_CHECKING:
    from zuno.durability.store import Store

__all__ = ["Claim", "claim_next", "reclaim_own", "submit"]


# Submitting ------------------------------------------------------------------------


def submit(
    store: Store,
    prompt: str,
    *,
    workspace: Path,
    agent: str,
    model: str,
    max_steps: int | None = None,
    approve: bool = False,
    title: str | None = None,
    mode: str | None = None,
    max_budget: float | None = None,
    max_tokens_budget: int | None = None,
) -> str:
    """Queue a session for the fleet; returns its id.

    Args:
        store: The shared store.
        prompt: What the agent should do.
        workspace: The folder the session runs in (every worker must reach it).
        agent: The agent whose tools are active.
        model: ``PROVIDER:MODEL`` (already resolved: the worker does not guess).
        max_steps: Model steps before the session fails (None: the agent's).
        approve: Approve what strict mode would ask (no one is there to ask).
        title: A short title (default: the prompt's first line).
        mode: The session's permission mode (stored with it, see :mod:`zuno.policy.modes`;
            None: the workspace configuration's).
        max_budget: A cap in US dollars the worker holds the session to (see
            :func:`zuno.policy.budget.session_budget`).
        max_tokens_budget: A cap on tokens, likewise.
    """
    session_id = new_id("ses")
    options: dict[str, Any] = {"model": model, "max_steps": max_steps, "approve": approve}
    if mode is not None:
        options["mode"] = mode
    if max_budget is not None:
        options["max_budget"] = max_budget
    if max_tokens_budget is not None:
        options["max_tokens_budget"] = max_tokens_budget
    line = next((x.strip() for x in prompt.splitlines() if x.strip()), "")
    with store.transaction() as db:
        db.execute(
            "INSERT INTO sessions (session_id, created_at, agent, workspace, model, title,"
            " state, prompt, options, updated_at)"
            " VALUES (?, zuno_now(), ?, ?, ?, ?, 'queued', ?, ?, zuno_now())",
            (
                session_id,
                agent,
                str(workspace.resolve()),
                model,
                title or line[:80],
                prompt,
                json.dumps(options),
            ),
        )
    return session_id


# Claiming ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Claim:
    """A session a worker has just taken, as stored.

    Attributes:
        session_id: The session.
        workspace: The folder it runs in.
        agent: Its agent.
        model: ``PROVIDER:MODEL``.
        prompt: The submitted prompt.
        options: The submitted options (``max_steps``, ``approve``).
        taken_from: The worker whose expired lease this session was taken from
            (None for a queued session).
    """

    session_id: str
    workspace: Path
    agent: str
    model: str | None
    prompt: str
    options: dict[str, Any]
    taken_from: str | None

    @classmethod
    def from_row(cls, row: tuple[Any, ...], taken_from: str | None) -> Claim:
        """From the stored (session, workspace, agent, model, prompt, options)."""
        session_id, workspace, agent, model, prompt, options = row
        return cls(
            str(session_id),
            Path(str(workspace)),
            str(agent),
            str(model) if model else None,
            str(prompt),
            parse_options(options),
            taken_from,
        )


# The owner's lease decides, read on the database's clock (zuno_now()): a worker
# never compares its own clock with another machine's. Ties on created_at go by id,
# so every worker sees the same order.
_CLAIMABLE = (
    "prompt IS NOT NULL AND (state = 'queued' OR (state = 'running' AND NOT EXISTS"
    " (SELECT 1 FROM workers w WHERE w.worker_id = {t}owner AND w.expires_at >= zuno_now())))"
)
"""A submitted session nobody runs: queued, or running under a lease that expired.

A subquery, not a join: PostgreSQL re-checks a locked row's condition against
the row another worker just committed, and a joined row would be the stale one.
"""

_CLAIM_SQL = (
    "SELECT s.session_id, s.state, s.owner, s.workspace, s.agent, s.model, s.prompt, s.options"
    f" FROM sessions s WHERE {_CLAIMABLE.format(t='s.')}"
    " ORDER BY s.created_at, s.session_id LIMIT 1 /*pg: FOR UPDATE OF s SKIP LOCKED*/"
)

_TAKE_SQL = (
    "UPDATE sessions SET owner = ?, state = 'running', updated_at = zuno_now()"
    f" WHERE session_id = ? AND {_CLAIMABLE.format(t='sessions.')} RETURNING session_id"
)


_CLAIM_TRIES = 8
"""Claims in a row that may lose their race to another worker before giving up for now."""

_CLAIMED_SQL = (
    "INSERT INTO events (session_id, call_id, kind, at, data)"
    " VALUES (?, NULL, 'fleet.claimed', zuno_now(), ?)"
)


def _claimed(worker_id: str, taken_from: str | None, was: str) -> str:
    return json.dumps({"worker": worker_id, "taken_from": taken_from, "was": was})


_RUNNING_OWNERS_SQL = (
    "SELECT DISTINCT owner FROM sessions WHERE state = 'running' AND prompt IS NOT NULL"
    " AND owner IS NOT NULL"
)
_EXPIRE_SQL = "UPDATE workers SET expires_at = zuno_now() - 1 WHERE worker_id = ?"


def _expire_dead_owners(store: Store, worker_id: str) -> None:
    """The fast path on one machine: a running session's owner whose process is gone here.

    Its lease is expired at once (the process that held it is dead: same machine,
    boot and PID namespace, and no process with its pid and start time), so the
    claim below takes its session over without waiting for the lease to run out.
    """
    me = this_worker()
    if not proc_is_ours():
        return
    dead = [
        str(owner)
        for (owner,) in store.query(_RUNNING_OWNERS_SQL)
        if (who := WorkerIdentity.parse(str(owner))) is not None
        and who != me
        and str(owner) != worker_id
        and who.same_pid_space(me)
        and not who.process_alive()
    ]
    if dead:
        with store.transaction() as db:
            for owner in dead:
                db.execute(_EXPIRE_SQL, (owner,))


_OWN_SQL = (
    "UPDATE sessions SET updated_at = zuno_now() WHERE owner = ? AND state = 'running'"
    " AND prompt IS NOT NULL AND session_id = (SELECT session_id FROM sessions"
    " WHERE owner = ? AND state = 'running' AND prompt IS NOT NULL"
    " ORDER BY created_at LIMIT 1)"
    " RETURNING session_id, workspace, agent, model, prompt, options"
)


def reclaim_own(store: Store, worker_id: str) -> Claim | None:
    """A running session this worker still owns but let go of (a store outage), or None.

    A worker runs one session at a time: one it owns while it is looking for
    work is one it had to drop. It takes it back first, as its own former owner
    (``taken_from``): what it was running then was killed, and is settled.
    """
    with store.transaction() as db:
        row = db.execute(_OWN_SQL, (worker_id, worker_id)).fetchone()
        if row is None:
            return None
        session_id, workspace, agent, model, prompt, options = tuple(row)
        db.execute(_CLAIMED_SQL, (session_id, _claimed(worker_id, worker_id, "running")))
    return Claim.from_row((session_id, workspace, agent, model, prompt, options), worker_id)


def claim_next(store: Store, worker_id: str) -> Claim | None:
    """Take the oldest claimable session for ``worker_id``, or None when there is none.

    One transaction: the row is chosen and owned before any other worker can
    choose it (a row lock skipped by the others on PostgreSQL, the database's
    write lock on SQLite).
    """
    _expire_dead_owners(store, worker_id)
    for _ in range(_CLAIM_TRIES):
        with store.transaction() as db:
            row = db.execute(_CLAIM_SQL).fetchone()
            if row is None:
                return None
            session_id, state, owner, workspace, agent, model, prompt, options = tuple(row)
            # Taken only while still claimable: checked again by the UPDATE, on
            # the latest committed row, so a session is never claimed twice.
            taken = db.execute(_TAKE_SQL, (worker_id, session_id)).fetchone()
            if taken is None:
                continue  # taken meanwhile: choose again
            taken_from = str(owner) if state == "running" and owner else None
            db.execute(_CLAIMED_SQL, (session_id, _claimed(worker_id, taken_from, str(state))))
        break
    else:
        return None  # every try lost its race: the caller asks again later
    return Claim.from_row((session_id, workspace, agent, model, prompt, options), taken_from)
