"""The fleet: sessions queued in the shared store and run by any number of workers.

``zuno submit`` writes a session with ``state = 'queued'``, its prompt and its
options (model, step limit, approvals). ``zuno worker`` processes, on any
machine that reaches the store, each loop::

    claim one session, in one transaction:
        the oldest queued one, or a running one whose owner's lease expired
        (FOR UPDATE SKIP LOCKED on PostgreSQL; BEGIN IMMEDIATE on SQLite)
    run it in its stored workspace, heartbeating the worker's lease
        queued   -> the agent loop on its prompt
        orphaned -> a resume: calls the dead worker left running are settled from
                    the store (a Never call becomes uncertain, never re-run) and
                    the model hears of them in the recovery notice
    set its state: done (answered) or failed (model or provider error, step
    limit), with the reason in a ``fleet.finished`` event, and release it

A session is owned by one worker at a time (``sessions.owner``): the worker's
lease (``zuno.durability.workers``) is what says the owner is alive. A worker that is
killed stops heartbeating; once its lease has expired any other worker takes
its session over. A worker stopped by SIGTERM (or SIGINT, SIGHUP) starts
nothing new, cancels the session it is running (its running calls settled as
``zuno run`` settles them), hands it back to the queue and expires its lease,
so another worker continues the session at once. A worker that lacks what the
session needs (the API key of its model) hands it back and stops, rather than
failing the whole queue.

A worker whose lease lapses fences itself (:mod:`zuno.durability.fencing`): its commands
are killed and it writes nothing more to the session, before another worker may
take it over. Through a store outage a worker keeps running: it drops the
session in hand without writing to it, waits with backoff, and takes it back
(:func:`~zuno.fleet.queue.reclaim_own`) unless another worker took it first.

Only sessions that were submitted (they carry a prompt) are taken over: an
interactive ``zuno run`` that crashed is left for its person to resume.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Generator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

import anyio

from zuno.agent.loop import AgentLoop, TurnStatus, load_history
from zuno.agent.messages import AssistantMessage
from zuno.agent.providers import MissingCredentials, ProviderError, make_provider
from zuno.agent.providers.clients import ClientPool
from zuno.config.loading import ConfigError
from zuno.contract.events import Event
from zuno.durability.recovery import settle_interrupted
from zuno.durability.store.errors import SessionBusy, StoreUnavailable
from zuno.durability.workers import WorkerIdentity
from zuno.fleet.queue import Claim, claim_next, reclaim_own, submit
from zuno.policy.approvals import ApproveAll, Approver, DenyAll

if TYPE_CHECKING:
    from zuno.durability.store import Store
    from zuno.durability.workers import WorkerLease
    from zuno.session.runtime import Runtime

__all__ = [
    "Claim",
    "FleetState",
    "FleetWorker",
    "SessionEnd",
    "WorkerCannotRun",
    "WorkerStopped",
    "claim_next",
    "reclaim_own",
    "release_runtime",
    "short_worker",
    "submit",
]

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
_MAX_BACKOFF = 5.0
"""The longest pause between looks at a store that does not answer (seconds)."""


class FleetState(StrEnum):
    """Where a session is in the fleet (``sessions.state``)."""

    QUEUED = "queued"
    """Submitted (or handed back by a stopped worker): any worker may take it."""
    RUNNING = "running"
    """A worker owns it; another takes it over only after that worker's lease expired."""
    DONE = "done"
    """The model answered."""
    FAILED = "failed"
    """It could not finish (the reason is in its ``fleet.finished`` event)."""
    IDLE = "idle"
    """An interactive session no process is running."""


class WorkerCannotRun(Exception):
    """This worker cannot run sessions (no API key for their model, say); the session went back."""


class WorkerStopped(Exception):
    """The worker was stopped by a signal after releasing its session and its lease."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# Running one session ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionEnd:
    """How a worker left a session.

    Attributes:
        state: ``done``, ``failed``, or ``queued`` (handed back by a stopped worker).
        reason: Why it failed or was handed back ("" when done).
        steps: Model steps this worker took in it.
    """

    state: FleetState
    reason: str = ""
    steps: int = 0


def _approver(claim: Claim) -> Approver:
    # No one is there to ask: what strict mode would ask is approved only when the
    # submitter said so; rules still deny what they deny.
    return ApproveAll() if claim.options.get("approve") else DenyAll()


def _max_steps(claim: Claim) -> int | None:
    value = claim.options.get("max_steps")
    return value if isinstance(value, int) and value > 0 else None


async def _run_claim(rt: Runtime, claim: Claim, worker_id: str) -> SessionEnd:
    """The agent loop of a claimed session in its own runtime (opened by the caller)."""
    from zuno.integrations.mcp.errors import McpServerError

    if claim.taken_from == worker_id:
        # Taken back after an outage: what this worker ran in it then was killed.
        settle_interrupted(rt.store, claim.session_id, gone=worker_id)
    state = rt.open_session(claim.session_id)  # settles what a dead owner left running
    history = load_history(rt.store, claim.session_id)
    last = history[-1] if history else None
    if isinstance(last, AssistantMessage) and not last.tool_calls:
        # The previous owner got its answer and died before recording the state.
        return SessionEnd(FleetState.DONE)
    if not claim.model:
        return SessionEnd(FleetState.FAILED, "the session names no model")
    try:
        provider = make_provider(claim.model, rt.config.providers)
    except MissingCredentials as exc:
        # This worker's environment lacks the key, not the session: another worker may have it.
        raise WorkerCannotRun(f"{exc} ({claim.session_id} went back to the queue)") from exc
    except ProviderError as exc:
        return SessionEnd(FleetState.FAILED, str(exc))
    try:
        async with rt:
            loop = AgentLoop(rt, state, provider, max_steps=_max_steps(claim))
            # A conversation already stored is continued (its recovery notice first).
            outcome = await loop.run(None if history else claim.prompt)
            for job_id in rt.jobs.mine_running():
                await rt.jobs.wait(job_id)
    except McpServerError as exc:
        return SessionEnd(FleetState.FAILED, str(exc))
    finally:
        with anyio.CancelScope(shield=True):
            await provider.aclose()
    if outcome.status is TurnStatus.ANSWERED:
        return SessionEnd(FleetState.DONE, steps=outcome.steps)
    return SessionEnd(FleetState.FAILED, outcome.message, outcome.steps)


# The worker ------------------------------------------------------------------------


Log = Callable[[str], None]
_E = TypeVar("_E", bound=BaseException)


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


@dataclass
class FleetWorker:
    """One worker process: claims sessions from the shared store and runs them, one at a time.

    Args:
        store: The shared store (also used by every session's runtime).
        lease: This process's lease, heartbeating while the worker lives.
        once: Run at most one session, then return.
        max_sessions: Return after this many sessions (None: no limit).
        idle_exit: Return after this many seconds without a session to claim
            (None: wait for work forever).
        poll: Seconds between looks at an empty queue.
        log: Where progress lines go (stderr by default).
    """

    store: Store
    lease: WorkerLease
    once: bool = False
    max_sessions: int | None = None
    idle_exit: float | None = None
    poll: float = 1.0
    log: Log = _stderr
    ran: int = field(default=0, init=False)
    """Sessions run to an end (done or failed) so far."""
    _stopping: int | None = field(default=None, init=False, repr=False)
    _scope: anyio.CancelScope | None = field(default=None, init=False, repr=False)
    _dropped: bool = field(default=False, init=False, repr=False)
    """A session was let go of (an outage): look for it first."""
    _outage_since: float | None = field(default=None, init=False, repr=False)
    _backoff: float = field(default=1.0, init=False, repr=False)
    _recorded: str | None = field(default=None, init=False, repr=False)
    """The session whose end event is written (its release may still be retried)."""

    @property
    def worker_id(self) -> str:
        """This worker's id (``w1:...``), as ``sessions.owner`` holds it."""
        return self.lease.identity.id

    def serve(self) -> int:
        """Claim and run sessions until done (see the options); returns how many ran.

        Raises:
            WorkerStopped: A stop signal arrived; the session in hand went back to
                the queue and the lease was expired.
            WorkerCannotRun: This worker lacks what sessions need (an API key); the
                session in hand went back to the queue.
        """
        anyio.run(self._serve)
        if self._stopping is not None:
            raise WorkerStopped(self._stopping)
        return self.ran

    async def _serve(self) -> None:
        # One SDK client per model address for all the sessions this worker runs.
        async with ClientPool():
            await self._serve_pooled()

    async def _serve_pooled(self) -> None:
        failure: Exception | None = None
        with anyio.open_signal_receiver(*_STOP_SIGNALS) as signals:
            async with anyio.create_task_group() as tg:

                async def watch() -> None:
                    async for signum in signals:
                        self._stopping = signum
                        if self._scope is not None:
                            self._scope.cancel()
                        return

                tg.start_soon(watch)
                try:
                    await self._loop()
                except Exception as exc:  # raised as it is, not inside an exception group
                    failure = exc
                finally:
                    tg.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _loop(self) -> None:
        idle_since = time.monotonic()
        while self._stopping is None:
            try:
                claim = reclaim_own(self.store, self.worker_id) if self._dropped else None
                self._dropped = False
                if claim is None:
                    claim = claim_next(self.store, self.worker_id)
            except StoreUnavailable as exc:
                # An outage must not end a worker: look again, less and less often.
                await self._ride_out(exc)
                continue
            self._answered()
            if claim is None:
                if self.once:
                    return
                if self.idle_exit is not None and time.monotonic() - idle_since >= self.idle_exit:
                    self.log(f"worker {self._short}: no session for {self.idle_exit:g} s; exiting")
                    return
                with self._cancellable():
                    await anyio.sleep(self.poll)
                continue
            await self._run(claim)
            idle_since = time.monotonic()
            if self.once and not self._dropped:
                return
            if self.max_sessions is not None and self.ran >= self.max_sessions:
                return

    async def _ride_out(self, exc: StoreUnavailable) -> None:
        """Wait out a store outage (one line when it starts, one when it ends)."""
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            self._backoff = self.poll
            self.log(f"worker {self._short}: the store is unavailable ({exc}); retrying")
        with self._cancellable():
            await anyio.sleep(self._backoff)
        self._backoff = min(_MAX_BACKOFF, self._backoff * 2)

    @contextmanager
    def _cancellable(self) -> Generator[anyio.CancelScope]:
        """A scope a stop signal cancels (at once, when it came before the scope)."""
        with anyio.CancelScope() as scope:
            self._scope = scope
            if self._stopping is not None:
                scope.cancel()
            try:
                yield scope
            finally:
                self._scope = None

    @property
    def _short(self) -> str:
        return short_worker(self.worker_id)

    async def _run(self, claim: Claim) -> None:
        taken = f" (taken over from {short_worker(claim.taken_from)})" if claim.taken_from else ""
        if claim.taken_from == self.worker_id:
            taken = " (taken back after the outage)"
        self.log(f"worker {self._short}: {claim.session_id} claimed{taken}")
        end: SessionEnd | None = None
        rt: Runtime | None = None
        try:
            rt = self._runtime(claim)
            with self._cancellable() as scope:
                end = await _run_claim(rt, claim, self.worker_id)
            if scope.cancelled_caught:  # a stop signal: another worker continues it
                end = SessionEnd(FleetState.QUEUED, "the worker was stopped")
        except BaseException as exc:
            if _leaf(exc, StoreUnavailable) is not None and _leaf(exc, SessionBusy) is None:
                # The store went away mid-session: the session stays this worker's
                # (nothing is written to it meanwhile); it is taken back once the store
                # answers, unless the lease lapsed first and another worker took it.
                self._drop(claim, rt, f"the store is unavailable ({_leaf(exc, StoreUnavailable)})")
                return
            busy = _leaf(exc, SessionBusy)
            if busy is not None:
                # Our lease lapsed and another worker took the session (or will): it is
                # not ours to write any more.
                self._drop(claim, rt, f"lost: {busy}")
                return
            config = _leaf(exc, ConfigError)
            if config is None:
                # Not the session's fault (a bug): hand it back, then stop.
                with suppress(Exception):  # the error that stops the worker is the one above
                    self._finish(claim, SessionEnd(FleetState.QUEUED, repr(exc)), rt)
                raise
            end = SessionEnd(FleetState.FAILED, f"cannot run in {claim.workspace}: {config}")
        await self._finish_riding_out(claim, end, rt)

    def _drop(self, claim: Claim, rt: Runtime | None, why: str) -> None:
        """Let go of a session without writing to it (its runtime, its processes)."""
        self.store.fence_sessions(why)
        self._dropped = True
        self.log(f"worker {self._short}: {claim.session_id} dropped: {why}")
        if rt is not None:
            with suppress(Exception):  # releasing writes nothing to a fenced session
                release_runtime(rt)

    async def _finish_riding_out(self, claim: Claim, end: SessionEnd, rt: Runtime | None) -> None:
        """Record the end, waiting for the store as long as it is away (the end is known)."""
        while True:
            try:
                self._finish(claim, end, rt)
            except StoreUnavailable as exc:
                if self._stopping is not None:
                    raise
                await self._ride_out(exc)
                continue
            except SessionBusy as exc:
                self._drop(claim, rt, f"lost before its end was recorded: {exc}")
                return
            self._answered()
            return

    def _answered(self) -> None:
        if self._outage_since is not None:
            away = time.monotonic() - self._outage_since
            self.log(f"worker {self._short}: the store answers again (away {away:.0f} s)")
            self._outage_since = None

    def _runtime(self, claim: Claim) -> Runtime:
        from zuno.session.runtime import Runtime

        return Runtime(claim.workspace, store=self.store, approver=_approver(claim))

    def _finish(self, claim: Claim, end: SessionEnd, rt: Runtime | None) -> None:
        """Record how the session ended and release it (never closing the shared store)."""
        data = {"worker": self.worker_id, "state": end.state.value, "reason": end.reason}
        kind = "fleet.released" if end.state is FleetState.QUEUED else "fleet.finished"
        if self._recorded != claim.session_id:  # once, even when the release is tried again
            self.store.append_event(Event(kind, claim.session_id, data=data))
            self._recorded = claim.session_id
        # The owner stays written, so `zuno sessions` shows which worker ran it.
        if rt is not None:
            release_runtime(rt, end.state.value)  # and its share of the lease
        # Also when the runtime never got to hold it (it failed before opening it).
        self.store.release_session(claim.session_id, self.worker_id, end.state.value)
        if end.state is not FleetState.QUEUED:
            self.ran += 1
        why = f": {end.reason}" if end.reason else ""
        self.log(f"worker {self._short}: {claim.session_id} {end.state.value}{why}")


def _leaf(exc: BaseException, kind: type[_E]) -> _E | None:
    """``exc`` when it is a ``kind``, or the first ``kind`` inside an exception group."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:  # pyright: ignore[reportUnknownVariableType]
            found = _leaf(inner, kind)  # pyright: ignore[reportUnknownArgumentType]
            if found is not None:
                return found
    return None


def release_runtime(rt: Runtime, state: str = "idle") -> None:
    """Let go of a session runtime that shares the worker's store (the store stays open)."""
    rt.release(state)


def short_worker(worker_id: str | None) -> str:
    """A worker id as people read it (``pid@machine``), or ``-`` for none."""

    identity = WorkerIdentity.parse(worker_id)
    if identity is None:
        return worker_id or "-"
    return identity.short
