"""The dispatcher: the one door every tool call goes through.

One model step is dispatched in two phases.

Pre-flight (:mod:`zuno.dispatch.preflight`), call by call in the model's order:
resolve, validate, classify, hooks, authorize. A call that fails any of these
is blocked and nothing of it runs.

Execution: admitted calls are grouped (:mod:`zuno.dispatch.scheduling`) and run. Each
attempt writes its ``started`` row before the tool can act and its result
right after. Results are handed back, and their ``call.result`` events
written, in the model's order whatever the completion order.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from zuno.contract.calls import CallRequest, CallResult, blocked_text, new_id
from zuno.contract.events import Event
from zuno.contract.output import bound_text
from zuno.contract.tool import (
    ArgumentsRejected,
    NotFound,
    ToolContext,
    ToolError,
    ToolResult,
    ToolUnavailable,
    TransientError,
    UncertainOutcome,
)
from zuno.core.declarations import BlockKind, Concurrency, Effect, Outcome, Replay
from zuno.core.sentences import full_stop
from zuno.dispatch.admission import Admitted, Blocked
from zuno.dispatch.after_hooks import after_hooks
from zuno.dispatch.arguments import planned_calls
from zuno.dispatch.call_checkpoints import CallCheckpoints
from zuno.dispatch.preflight import Preflight
from zuno.dispatch.scheduling import plan_groups
from zuno.durability.recovery import INSPECTED, prefetch_inspection
from zuno.durability.store.records import CallRecord
from zuno.durability.telemetry import RunningCall, call_running, call_span

if TYPE_CHECKING:
    from zuno.dispatch.host import DispatchHost
    from zuno.dispatch.session_state import SessionState
    from zuno.workspace.checkpoints.store import Checkpoints

__all__ = ["CallRequest", "CallResult", "Dispatcher", "new_id"]

_NEVER_FAILED_NOTE = (
    "\n[Zuno: this call will not be run again automatically. Before any new change, inspect "
    "the real state with a read-only call that looks at it (read, grep, glob, lsp, job, bg "
    "output); side-effecting and delegating calls are refused until one has run.]"
)


@dataclass(slots=True)
class _Batch:
    """What the execution of one step has learned so far."""

    failed: bool = False
    """A Never call of this step ended in error or uncertain."""
    queued: bool = False
    """A read-only call's result waits in the store's queue: the step's close commits it."""


class Dispatcher:
    """Runs model steps through pre-flight, scheduling, execution and persistence."""

    def __init__(self, host: DispatchHost) -> None:
        self._host = host
        self._preflight = Preflight(host)
        self._checkpoints = CallCheckpoints(host)

    async def dispatch(
        self, session: SessionState, requests: Sequence[CallRequest]
    ) -> list[CallResult]:
        """Dispatch one model step; results come back in the model's order."""
        host = self._host
        # The step's calls as asked, and who runs them: calls a kill stops before
        # they start have no row, and `zuno show` lists them as not run.
        opening = Event(
            "dispatch.started",
            session.session_id,
            data={
                "calls": len(requests),
                "requests": planned_calls(requests),
                "runner": host.identity,
            },
        )
        if host.config.replay.require_inspection:
            # The inspection rule's query rides with the step's opening.
            prefetch_inspection(host.store, session.session_id)
        # Fenced: a worker that lost the session (SessionBusy) opens no step.
        step = host.store.begin_step(session.session_id, opening, worker=host.identity)
        host.events.deliver(opening)
        results: list[CallResult | None] = [None] * len(requests)
        admitted: list[Admitted] = []
        batch = _Batch()
        try:
            for index, request in enumerate(requests):
                call_id = new_id("call")
                try:
                    admitted.append(await self._preflight.admit(session, index, call_id, request))
                except Blocked as blocked:
                    results[index] = self._preflight.block(
                        session, step, index, call_id, request, blocked
                    )
            await self._execute_all(session, step, admitted, results, batch)
        finally:
            # Plain synchronous code: a cancellation cannot interrupt it.
            self._never_started(session, step, admitted, results)
            settled = [r for r in results if r is not None]
            closing: list[Event] = []
            for r in settled:
                r.step = step
                if _inspected(r):
                    # The inspection rule's evidence (a query, see zuno.durability.recovery),
                    # written with the step's close: no commit of its own.
                    closing.append(
                        Event(INSPECTED, session.session_id, r.call_id, {"tool": r.tool})
                    )
                closing.append(
                    Event(
                        "call.result",
                        session.session_id,
                        r.call_id,
                        {
                            "index": r.index,
                            "tool": r.tool,
                            "outcome": r.outcome.value,
                            "block_kind": r.block_kind.value if r.block_kind else None,
                        },
                    )
                )
            closing.append(Event("dispatch.finished", session.session_id, data={"step": step}))
            host.store.append_events(closing, deliver=host.events.deliver)
            if batch.queued:
                # The read-only results, with the step's close, in one commit: before
                # any result is handed on.
                host.store.flush_or_keep()
        return [r for r in results if r is not None]

    async def _execute_all(
        self,
        session: SessionState,
        step: int,
        admitted: list[Admitted],
        results: list[CallResult | None],
        batch: _Batch,
    ) -> None:
        bound = self._host.config.concurrency.tool_calls

        async def run(call: Admitted) -> None:
            results[call.index] = await self._execute(session, step, call, batch)

        async def drain(queue: deque[Admitted]) -> None:
            # One of at most `bound` runners of a group's ParallelSafe calls, taking them
            # in model order: the bound holds without a task per call waiting its turn.
            while queue:
                await run(queue.popleft())

        for group in plan_groups(admitted):
            # The barrier spans this session's steps running at once (MCP requests).
            async with session.barrier.hold(group.exclusive):
                if group.exclusive or len(group.calls) == 1:
                    await run(group.calls[0])
                    continue
                queue = deque(
                    c for c in group.calls if c.declaration.concurrency is Concurrency.PARALLEL_SAFE
                )
                runners = min(bound, len(queue))
                async with anyio.create_task_group() as tg:
                    for call in group.calls:
                        if call.declaration.concurrency is not Concurrency.PARALLEL_SAFE:
                            tg.start_soon(run, call)  # not counted against the bound
                        elif runners:
                            runners -= 1
                            tg.start_soon(drain, queue)

    def _never_started(
        self,
        session: SessionState,
        step: int,
        admitted: list[Admitted],
        results: list[CallResult | None],
    ) -> None:
        """Settle the calls a cancellation interrupted or stopped before they began."""
        missing = [call for call in admitted if results[call.index] is None]
        if not missing:
            return
        rows = {r.call_id: r for r in self._host.store.calls(session.session_id)}
        for call in missing:
            row = rows.get(call.call_id)
            if row is not None:  # it ran and was settled when it was cancelled
                results[call.index] = CallResult(
                    call.call_id,
                    session.session_id,
                    call.index,
                    call.tool.name,
                    Outcome(row.outcome or Outcome.UNCERTAIN.value),
                    row.result or "",
                    call.declaration,
                    attempt=row.attempt,
                    is_error=True,
                    model_call_id=call.request.model_call_id,
                    started_at=row.started_at,
                    finished_at=row.finished_at,
                )
                continue
            now = time.time()
            text = "Cancelled before it started: nothing was run."
            record = self._record(session, step, call, 1, now)
            record.finish_seq = self._host.store.next_order(session.session_id)
            record.status = "finished"
            record.outcome = Outcome.ERROR.value
            record.result = text
            record.is_error = True
            record.finished_at = now
            event = Event("call.cancelled", session.session_id, call.call_id, {"index": call.index})
            self._host.store.record_blocked(record, event)
            call_span(record)
            results[call.index] = CallResult(
                call.call_id,
                session.session_id,
                call.index,
                call.tool.name,
                Outcome.ERROR,
                text,
                call.declaration,
                is_error=True,
                model_call_id=call.request.model_call_id,
                started_at=now,
                finished_at=now,
            )

    def _record(
        self, session: SessionState, step: int, call: Admitted, attempt: int, now: float
    ) -> CallRecord:
        d = call.declaration
        return CallRecord(
            call_id=call.call_id,
            session_id=session.session_id,
            step=step,
            index=call.index,
            attempt=attempt,
            tool=call.tool.name,
            arguments=call.arguments_json,
            args_hash=call.args_hash,
            effect=d.effect.value,
            replay=d.replay.value,
            concurrency=d.concurrency.value,
            status="started",
            started_at=now,
            # Its place in the session's order: the inspection rule compares places, not times.
            start_seq=self._host.store.next_order(session.session_id),
            model_call_id=call.request.model_call_id,
            runner=self._host.identity,
            mode=call.mode,
        )

    async def _execute(
        self, session: SessionState, step: int, call: Admitted, batch: _Batch
    ) -> CallResult:
        host = self._host
        if batch.failed or session.barrier.overlapped:
            # A Never call of this very step, or of a step of this session running
            # at once, may have failed after pre-flight: the inspection rule applies.
            reason = self._preflight.inspection_needed(session, call)
            if reason:
                blocked = Blocked(BlockKind.DENIED, reason, call.declaration)
                return self._preflight.block(
                    session, step, call.index, call.call_id, call.request, blocked
                )
        replay = host.config.replay
        attempt = 1
        while True:
            result, transient = await self._attempt(session, step, call, attempt, batch)
            retry = transient and call.declaration.replay is Replay.SAFE
            if not retry or attempt >= replay.attempts:
                break
            delay = min(replay.max_delay, replay.base_delay * (2 ** (attempt - 1)))
            delay *= 0.5 + random.random() / 2  # jitter spreads retries of parallel calls
            host.events.emit(
                Event(
                    "call.retry",
                    session.session_id,
                    call.call_id,
                    {"attempt": attempt + 1, "delay": round(delay, 3)},
                )
            )
            await anyio.sleep(delay)
            attempt += 1
        if result.outcome in (Outcome.ERROR, Outcome.UNCERTAIN) and (
            call.declaration.replay is Replay.NEVER
        ):
            batch.failed = True
        await after_hooks(self._host, session, call, result)
        return result

    async def _attempt(
        self, session: SessionState, step: int, call: Admitted, attempt: int, batch: _Batch
    ) -> tuple[CallResult, bool]:
        """One attempt; also says whether its failure was transient."""
        host = self._host
        # The workspace as it was before this side-effecting call (zuno diff, zuno undo).
        snapshot = await self._checkpoints.before(session, call, attempt)
        started = time.time()
        record = self._record(session, step, call, attempt, started)
        record.snapshot = snapshot
        started_event = Event(
            "call.started",
            session.session_id,
            call.call_id,
            {"index": call.index, "tool": call.tool.name, "attempt": attempt},
            at=started,
        )
        # Intent before effect. A read-only call has no effect to precede, so its
        # started row may ride with its result (one commit instead of two).
        # Fenced: the row goes in only while this worker still holds the session, else
        # SessionBusy and the tool does not run.
        host.store.call_started(
            record,
            started_event,
            durable=call.declaration.effect is not Effect.READ_ONLY,
            fence=True,
        )
        host.events.deliver(started_event)
        running = call_running(record)  # current while the tool runs: its work nests under it
        limits = host.output_limits
        ctx = ToolContext(
            workspace=host.workspace,
            session_id=session.session_id,
            call_id=call.call_id,
            attempt=attempt,
            limits=limits,
            artifacts=host.artifacts,
            config=host.config,
            services=host,
            extra={"session": session, "snapshot": snapshot},
            protected=host.control_paths.named,
            output_tap=host.output_tap,
        )
        transient = False
        block_kind: BlockKind | None = None
        try:
            with running.current():
                result = await call.tool.run(call.args, ctx)
            outcome = (
                Outcome.UNCERTAIN
                if result.uncertain
                else Outcome.ERROR
                if result.is_error
                else Outcome.OK
            )
        except UncertainOutcome as exc:
            result = ToolResult(
                f"Outcome uncertain: {full_stop(str(exc))} The effect may or may not have "
                "happened; inspect the real state before doing anything that depends on it.",
                is_error=True,
                uncertain=True,
                reason=str(exc),
            )
            outcome = Outcome.UNCERTAIN
        except (ArgumentsRejected, ToolUnavailable) as exc:
            block_kind = exc.block_kind  # refused before any effect: blocked, of its kind
            result = ToolResult(
                blocked_text(block_kind, str(exc), "Nothing was changed."), is_error=True
            )
            outcome = Outcome.BLOCKED
        except ToolError as exc:
            transient = isinstance(exc, TransientError)
            # A lookup that found nothing still observed the state (NotFound).
            data = {"observed": "absent"} if isinstance(exc, NotFound) else None
            result = ToolResult(f"Error: {exc}", is_error=True, reason=str(exc), data=data)
            outcome = Outcome.ERROR
        except anyio.get_cancelled_exc_class():
            self._finish_cancelled(call, record, ctx, running)  # synchronous: not interrupted
            raise
        except Exception as exc:
            result = ToolResult(
                f"Error: {call.tool.name} failed inside Zuno ({type(exc).__name__}: {exc}). "
                "This is a defect of the tool, not of your arguments.",
                is_error=True,
                reason=f"failed inside Zuno ({type(exc).__name__}: {exc})",
            )
            outcome = Outcome.ERROR
        if (
            outcome in (Outcome.ERROR, Outcome.UNCERTAIN)
            and call.declaration.replay is Replay.NEVER
        ):
            result.output += _NEVER_FAILED_NOTE
        bounded = bound_text(
            result.output,
            limits,
            lambda: host.artifacts.path_for(session.session_id, call.call_id, "result"),
        )
        artifact = str(bounded.artifact or result.artifact or "") or None
        finished = time.time()
        if block_kind is not None:
            blocked_event = Event(
                "dispatch.blocked",
                session.session_id,
                call.call_id,
                {
                    "index": call.index,
                    "tool": call.tool.name,
                    "block_kind": block_kind.value,
                    "reason": result.output,
                },
                at=finished,
            )
            host.events.emit(blocked_event)
        record.status = "finished"
        record.outcome = outcome.value
        record.block_kind = block_kind.value if block_kind else None
        record.result = bounded.text
        record.is_error = result.is_error or outcome is not Outcome.OK
        record.finished_at = finished
        record.finish_seq = host.store.next_order(session.session_id)
        record.artifact = artifact
        if outcome in (Outcome.ERROR, Outcome.UNCERTAIN):
            record.reason = _one_line(result.reason or result.output)
        finished_data: dict[str, object] = {
            "index": call.index,
            "tool": call.tool.name,
            "attempt": attempt,
            "outcome": outcome.value,
        }
        exit_status = (result.data or {}).get("exit_status")
        if exit_status is not None:
            # A command that ran to its end: how it ended, stored beside the row.
            finished_data["exit_status"] = exit_status
        egress = (result.data or {}).get("egress")
        if egress is not None:
            # The egress ledger of a command in proxy network mode: one row per connection.
            finished_data["egress"] = egress
        finished_event = Event(
            "call.finished", session.session_id, call.call_id, finished_data, at=finished
        )
        # A read-only call's result waits for the step's close (one commit for them
        # all); any other is committed now, before anything else happens.
        read_only = call.declaration.effect is Effect.READ_ONLY
        host.store.call_finished(record, finished_event, commit=not read_only)
        batch.queued = batch.queued or read_only
        host.events.deliver(finished_event)
        call_span(record, running)
        return CallResult(
            call.call_id,
            session.session_id,
            call.index,
            call.tool.name,
            outcome,
            bounded.text,
            call.declaration,
            block_kind,
            attempt=attempt,
            is_error=record.is_error,
            data=result.data,
            model_call_id=call.request.model_call_id,
            started_at=started,
            finished_at=finished,
            artifact=artifact,
            images=result.images,
        ), transient

    @property
    def checkpoints(self) -> Checkpoints:
        """The shadow git store of this runtime's workspace (see
        :mod:`zuno.workspace.checkpoints.store`).
        """
        return self._checkpoints.store

    def settle_checkpoints(self) -> None:
        """Give the calls recorded early their checkpoints, if ready."""
        self._checkpoints.settle()

    def prepare_checkpoints(self, tools: Sequence[object]) -> None:
        """Take the workspace's first checkpoint look in the background (a session starts)."""
        self._checkpoints.prepare(tools)

    def close(self) -> None:
        """Stop watching the workspace (the checkpoints' inotify instance), if one started."""
        self._checkpoints.close()

    def _finish_cancelled(
        self, call: Admitted, record: CallRecord, ctx: ToolContext, running: RunningCall
    ) -> None:
        """Store a call cancelled while running: what the tool left for this, else a default.

        A read-only call changed nothing (``error``); otherwise the effect may
        have happened (``uncertain``), unless the tool said it cannot have (a
        question). A tool's own text, a command's output so far, is kept.
        """
        host = self._host
        left = ctx.on_cancel
        if left is not None:
            uncertain = left.uncertain
            text = left.output
        else:
            uncertain = call.declaration.effect is not Effect.READ_ONLY
            text = (
                "Cancelled while running: the effect may or may not have happened."
                if uncertain
                else "Cancelled while running."
            )
        if uncertain and call.declaration.replay is Replay.NEVER:
            text += _NEVER_FAILED_NOTE
        bounded = bound_text(
            text,
            host.output_limits,
            lambda: host.artifacts.path_for(record.session_id, call.call_id, "result"),
        )
        record.status = "finished"
        record.outcome = (Outcome.UNCERTAIN if uncertain else Outcome.ERROR).value
        record.result = bounded.text
        record.artifact = str(bounded.artifact or (left.artifact if left else None) or "") or None
        record.is_error = True
        record.finished_at = time.time()
        record.finish_seq = host.store.next_order(record.session_id)
        record.reason = "cancelled while it was running (the dispatch was cancelled)"
        event = Event(
            "call.finished",
            record.session_id,
            call.call_id,
            {
                "index": call.index,
                "tool": call.tool.name,
                "attempt": record.attempt,
                "outcome": record.outcome,
                "cancelled": True,
            },
        )
        host.store.call_finished(record, event)
        host.events.deliver(event)
        call_span(record, running)


def _one_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of text, cut to limit characters."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _inspected(result: CallResult) -> bool:
    """Whether a result is a completed inspection of the real state."""
    declaration = result.declaration
    if declaration is None or not declaration.inspects:
        return False
    absent = result.outcome is Outcome.ERROR and (result.data or {}).get("observed") == "absent"
    return result.outcome is Outcome.OK or absent
