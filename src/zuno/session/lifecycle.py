"""A session's life in one runtime: opened, held, released.

Opening a session, in this order (:meth:`SessionLifecycle.open`):

1. Take this process's lease in the store, once: every runtime of the process
   shares it (:mod:`zuno.durability.workers`).
2. Find the session by its id or a unique prefix, or check the agent and
   create a new one (a new session has nothing to settle).
3. Acquire it for this worker, waiting while another live worker holds it:
   ours before anything is settled, so a live owner keeps its calls.
4. Settle what a gone owner left: calls left ``started`` get their outcome,
   never a re-run (:mod:`zuno.durability.recovery`), and the jobs it left
   running are lost (:mod:`zuno.session.jobs`).
5. Load the permission mode chosen now, or stored with the session
   (:mod:`zuno.policy.modes`).
6. Tell the session hooks it started (``session_start``), the first time this
   runtime opens it.

Releasing (:meth:`SessionLifecycle.release`) runs the other way: the hooks
hear ``session_end``, each session is released in the store, and this
runtime's share of the lease ends.

The runtime (:mod:`zuno.session.runtime`) turns what was opened into the
:class:`~zuno.dispatch.session_state.SessionState` the dispatcher sees.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zuno.config.permission import PermissionMode
from zuno.contract.calls import new_id
from zuno.contract.events import EventBus
from zuno.durability.recovery import settle_interrupted
from zuno.durability.store import SessionBusy, SessionRecord, Store, StoreError
from zuno.durability.workers import WorkerLease, shared_lease
from zuno.policy.hooks import HookNotice, Hooks, failure_event
from zuno.policy.modes import check_mode, remember_mode, stored_mode
from zuno.session.jobs import JobLane

__all__ = ["Opened", "SessionLifecycle", "UnknownSession"]

_log = logging.getLogger("zuno.session.runtime")


class UnknownSession(LookupError):
    """No session has that id."""


@dataclass(frozen=True, slots=True)
class Opened:
    """A session just opened: its row, and what opening it found."""

    record: SessionRecord
    resumed: bool
    """A stored session was resumed (False: it was created now)."""
    mode: PermissionMode | None
    """The mode chosen now or stored with the session; None: the configuration's."""


class SessionLifecycle:
    """Opens and releases the sessions of one runtime, and holds its share of the lease."""

    def __init__(
        self,
        store: Store,
        jobs: JobLane,
        hooks: Hooks,
        events: EventBus,
        *,
        identity: str,
        workspace: Path,
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._hooks = hooks
        self._events = events
        self._identity = identity
        self._workspace = workspace
        self._lease: WorkerLease | None = None
        """This process's lease in the store, taken with the first session opened."""
        self._held: set[str] = set()
        """Sessions this runtime holds (released by :meth:`release`)."""

    @property
    def lease(self) -> WorkerLease | None:
        """This runtime's share of the process's lease (None before a session is opened)."""
        return self._lease

    def open(
        self,
        session_id: str | None,
        *,
        agent: str,
        check_agent: Callable[[str], object],
        parent_call_id: str | None = None,
        model: str | None = None,
        title: str | None = None,
        depth: int = 0,
        wait: float = 0.0,
        mode: PermissionMode | None = None,
    ) -> Opened:
        """Open a stored session (``session_id``) or create one, in the order above.

        ``check_agent`` raises for an agent name that is not known: a new
        session is checked before its row is written.

        Raises:
            UnknownSession: No session has that id (or the prefix is ambiguous).
            SessionBusy: Another live worker holds the session.
        """
        if self._lease is None:
            self._lease = shared_lease(self._store)
        if session_id is not None:
            record = self._acquire(self._find(session_id).session_id, wait)
            starts = record.session_id not in self._held
            self._held.add(record.session_id)
            # Calls and jobs a gone worker left running get their outcome now (never a re-run).
            settle_interrupted(self._store, record.session_id)
            self._jobs.mark_lost(record.session_id)
            check_agent(record.agent)
        else:
            check_agent(agent)
            record = self._store.create_session(
                new_id("ses"),
                agent,
                str(self._workspace),
                parent_call_id,
                model,
                title,
                owner=self._identity,
            )
            self._held.add(record.session_id)
            starts = True
        chosen = check_mode(mode) if mode is not None else None
        if chosen is not None:
            remember_mode(self._store, record.session_id, chosen)
        elif session_id is not None:
            chosen = stored_mode(self._store, record.session_id)
        if starts:
            facts = {
                "agent": record.agent,
                "workspace": str(self._workspace),
                "resumed": session_id is not None,
                "parent_call_id": record.parent_call_id,
                "depth": depth,
            }
            self._notice(HookNotice("session_start", record.session_id, facts))
        return Opened(record, session_id is not None, chosen)

    def _find(self, session_id: str) -> SessionRecord:
        """The stored session with this id, or the one whose id starts with it."""
        record = self._store.get_session(session_id)
        if record is not None:
            return record
        matches = self._store.find_sessions(session_id)
        if len(matches) != 1:
            raise UnknownSession(
                f"no session {session_id!r}"
                + (f" (ambiguous: {len(matches)} match)" if matches else "")
                + "; `zuno sessions` lists them"
            )
        record = self._store.get_session(matches[0])
        assert record is not None
        return record

    def _acquire(self, session_id: str, wait: float) -> SessionRecord:
        """The session, held by this worker; tried for ``wait`` seconds while another holds it."""
        deadline = time.monotonic() + wait
        while True:
            try:
                return self._store.acquire_session(session_id, self._identity)
            except SessionBusy:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                time.sleep(min(0.5, left))

    def _notice(self, notice: HookNotice) -> None:
        """Tell the session hooks; one that fails is recorded and stops nothing.

        Synchronous, as opening and releasing are: each hook is bounded by its timeout.
        """
        for failed in self._hooks.notify_now(notice):
            self._events.emit(failure_event(notice.session_id, None, notice.phase, failed))

    def release(self, state: str = "idle") -> None:
        """Release the sessions held (as ``state``), then this runtime's share of the lease."""
        held, self._held = self._held, set()
        try:
            for session_id in sorted(held):
                try:
                    self._notice(HookNotice("session_end", session_id, {"state": state}))
                    self._store.release_session(session_id, self._identity, state)
                except StoreError as exc:
                    # Not released now: the lease ends below, and then it is free anyway.
                    _log.warning("zuno: session %s was not released: %s", session_id, exc)
        finally:
            lease, self._lease = self._lease, None
            if lease is not None:
                lease.stop()
