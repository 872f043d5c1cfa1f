"""``zuno run --json``: a run as JSON lines, one event per line, for programs.

Every line on stdout is one JSON object with ``"v": 1`` (the format's
version), ``"seq"`` (1, 2, 3, ... in the order written) and ``"type"``;
nothing else is written to stdout. Diagnostics go to stderr. The event types
and fields, and the exit statuses, are documented in ``docs/headless.md``;
fields are only ever added within one version.

Nothing is asked (:mod:`zuno.cli.headless_run` runs the turn): approvals are
denied unless a rule or ``--yes`` allows the call, and questions are answered
"no one can answer", as without a terminal. The events come from the
runtime's event bus (what the dispatcher and the agent loop say happened,
persisted as they happen), the call rows of the store (arguments,
declaration, result), and the model's streamed text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import IntEnum
from typing import IO, Any

from zuno.agent.loop import TurnOutcome, TurnStatus
from zuno.cli.run_report import RunClock, changed_files
from zuno.contract.events import Event
from zuno.core.installed import installed_version
from zuno.dispatch.session_state import SessionState
from zuno.execution.sandbox.egress.ledger import egress_summary
from zuno.session.runtime import Runtime

__all__ = ["FORMAT_VERSION", "ExitStatus", "HeadlessWriter"]

FORMAT_VERSION = 1
"""The ``"v"`` of every line; raised only when a field changes meaning or goes away."""


class ExitStatus(IntEnum):
    """How ``zuno run`` ends, with or without ``--json`` (see docs/headless.md)."""

    ANSWERED = 0
    """The model gave its final answer (some calls may have failed or been refused)."""
    NOT_ANSWERED = 1
    """The turn ended without an answer: a model request failed, or the step limit."""
    USAGE = 2
    """The command, zuno.json, the agent, the model or its key cannot be used."""
    BUDGET = 3
    """The turn stopped before a model request: ``--max-budget`` or ``--max-tokens-budget``."""
    STORE_UNAVAILABLE = 4
    """The store cannot be opened, reached or locked right now (try again later)."""
    INTERRUPTED = 130
    """Ctrl-C (SIGTERM and SIGHUP end with 143 and 129: 128 plus the signal)."""


class HeadlessWriter:
    """Writes a run's events as JSON lines to ``out`` (a binary stream).

    Args:
        out: Where the lines go (stdout's buffer); flushed after each line.
        stream: False writes only the ``end`` event (``--output-format json``):
            one JSON object for the whole run.
    """

    def __init__(self, out: IO[bytes], *, stream: bool = True) -> None:
        self._rt: Runtime | None = None
        self._out: IO[bytes] | None = out
        self._stream = stream
        self._clock = RunClock()
        self._denied: list[dict[str, Any]] = []
        self._settled_ids: list[str] = []
        self._cached_tokens: int | None = None
        self._answer: str | None = None
        self.last_text = ""
        self._seq = 0
        self._top: str | None = None
        self._followed: set[str] = set()
        self._step: dict[str, int] = {}
        self._exit_status: dict[str, int] = {}
        self._egress: dict[str, dict[str, int]] = {}
        self._tally: dict[str, int] = {}
        self._input_tokens: int | None = None
        self._output_tokens: int | None = None
        self._cost_usd = 0.0
        self._cost_known = True
        self.ended = False

    @property
    def session_id(self) -> str | None:
        """The run's own session, once its ``session`` event is written."""
        return self._top

    # Writing ------------------------------------------------------------------

    def emit(self, type_: str, **fields: Any) -> None:
        """Write one event line (dropped silently once the reader has gone away)."""
        self._seq += 1
        if self._out is None or (not self._stream and type_ != "end"):
            return
        event = {"v": FORMAT_VERSION, "seq": self._seq, "type": type_, **fields}
        try:
            line = json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates from undecodable output: escape them
            line = json.dumps(event, separators=(",", ":")).encode("ascii")
        try:
            self._out.write(line + b"\n")
            self._out.flush()
        except (BrokenPipeError, ValueError, OSError):
            # The reader closed the pipe: the run goes on (the store keeps it all).
            self._out = None

    # The run --------------------------------------------------------------------

    def session(self, runtime: Runtime, state: SessionState, model: str) -> None:
        """The ``session`` event of the run's own session; follows it from now on."""
        self._rt = runtime
        self._top = state.session_id
        self._followed.add(state.session_id)
        self.emit(
            "session",
            session_id=state.session_id,
            agent=state.agent_name,
            model=model,
            workspace=str(runtime.workspace),
            depth=state.depth,
            parent_call_id=None,
            tools=sorted(state.surface.names),
            zuno=installed_version(),
        )

    def watch(self, runtime: Runtime) -> Callable[[], None]:
        """Follow ``runtime``'s events; returns the unsubscriber."""
        self._rt = runtime
        return runtime.events.subscribe(self._on_event)

    def text(self, piece: str) -> None:
        """A streamed piece of the top agent's text."""
        top = self._top or ""
        self.last_text += piece
        self.emit("text", session_id=top, step=self._step.get(top), delta=piece)

    def finish(self, outcome: TurnOutcome) -> ExitStatus:
        """The ``answer`` (when there is one) and ``end`` events of a finished turn."""
        self.last_text = outcome.text
        if outcome.status is TurnStatus.ANSWERED:
            self._answer = outcome.text
            self.emit(
                "answer", session_id=outcome.session_id, text=outcome.text, steps=outcome.steps
            )
            code = ExitStatus.ANSWERED
        elif outcome.status is TurnStatus.BUDGET:
            code = ExitStatus.BUDGET
        else:
            code = ExitStatus.NOT_ANSWERED
        self.end(outcome.status.value, code, outcome.message, steps=outcome.steps)
        return code

    def end(self, status: str, code: int, message: str = "", *, steps: int | None = None) -> None:
        """The last event: how the run ended and its exit status."""
        if self.ended:
            return
        self.ended = True
        self.emit(
            "end",
            session_id=self._top,
            status=status,
            exit_code=code,
            is_error=code != ExitStatus.ANSWERED,
            message=message,
            answer=self._answer,
            steps=steps,
            durations=self._clock.as_dict(),
            usage={
                "input_tokens": self._input_tokens,
                "output_tokens": self._output_tokens,
                "cached_input_tokens": self._cached_tokens,
                "cost_usd": round(self._cost_usd, 6) if self._cost_known else None,
            },
            calls=dict(sorted(self._tally.items())),
            denied=self._denied,
            changed_files=self._changed_files(),
        )

    def _changed_files(self) -> list[str] | None:
        if self._rt is None:
            return []
        try:
            return changed_files(self._rt.store, self._rt.workspace, self._settled_ids)
        except Exception:  # a store that went away: the files cannot be told
            return None

    # Runtime events -------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        data = event.data
        if event.kind == "agent.started" and int(data.get("depth", 0)) > 0:
            self._child_session(event)
            return
        if event.session_id not in self._followed:
            return  # another session sharing this runtime
        handler = _HANDLERS.get(event.kind)
        if handler is not None:
            handler(self, event)

    def _child_session(self, event: Event) -> None:
        assert self._rt is not None
        self._followed.add(event.session_id)
        record = self._rt.store.get_session(event.session_id)
        self.emit(
            "session",
            session_id=event.session_id,
            agent=event.data.get("agent"),
            model=event.data.get("model"),
            workspace=str(self._rt.workspace),
            depth=int(event.data.get("depth", 0)),
            parent_call_id=record.parent_call_id if record is not None else None,
            tools=None,
            zuno=installed_version(),
        )

    def _step_started(self, event: Event) -> None:
        if event.session_id == self._top:
            self._clock.start("model")
        step = int(event.data.get("step", 0))
        self._step[event.session_id] = step
        self.emit("step", session_id=event.session_id, depth=event.data.get("depth"), step=step)

    def _reply(self, event: Event) -> None:
        if event.session_id == self._top:
            self._clock.stop("model")
        data = event.data
        tokens_in, tokens_out = data.get("input_tokens"), data.get("output_tokens")
        cached = data.get("cached_input_tokens")
        if isinstance(cached, int):
            self._cached_tokens = (self._cached_tokens or 0) + cached
        if isinstance(tokens_in, int):
            self._input_tokens = (self._input_tokens or 0) + tokens_in
        if isinstance(tokens_out, int):
            self._output_tokens = (self._output_tokens or 0) + tokens_out
        cost = data.get("cost_usd")
        if isinstance(cost, int | float):
            self._cost_usd += cost
        else:
            self._cost_known = False
        self.emit(
            "usage",
            session_id=event.session_id,
            step=data.get("step"),
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            cached_input_tokens=cached,
            stop_reason=data.get("stop_reason"),
            model=data.get("model"),
            cost_usd=cost,
        )

    def _call(self, call_id: str | None) -> dict[str, Any]:
        """What the store holds on a call (its latest attempt)."""
        if call_id is None or self._rt is None:
            return {}
        rows = self._rt.store.query(
            "SELECT tool, arguments, effect, replay, concurrency, result, attempt,"
            " model_call_id, started_at, finished_at"
            " FROM calls WHERE call_id = ? ORDER BY attempt DESC LIMIT 1",
            (call_id,),
        )
        if not rows:
            return {}
        tool, arguments, effect, replay, concurrency, result, attempt, model_call_id = rows[0][:8]
        started_at, finished_at = rows[0][8:10]
        declaration = (
            {"effect": effect, "replay": replay, "concurrency": concurrency}
            if effect is not None
            else None  # an unknown tool has no declaration
        )
        return {
            "tool": tool,
            "arguments": arguments,
            "declaration": declaration,
            "result": result,
            "attempts": attempt,
            "model_call_id": model_call_id,
            "duration_ms": (
                round((float(finished_at) - float(started_at)) * 1000)
                if started_at is not None and finished_at is not None
                else None
            ),
        }

    def _call_started(self, event: Event) -> None:
        row = self._call(event.call_id)
        self.emit(
            "call.started",
            session_id=event.session_id,
            call_id=event.call_id,
            model_call_id=row.get("model_call_id"),
            index=event.data.get("index"),
            tool=event.data.get("tool"),
            attempt=event.data.get("attempt"),
            arguments=row.get("arguments"),
            declaration=row.get("declaration"),
        )

    def _call_finished(self, event: Event) -> None:
        if event.call_id is not None and "exit_status" in event.data:
            self._exit_status[event.call_id] = int(event.data["exit_status"])
        if event.call_id is not None and isinstance(event.data.get("egress"), list):
            self._egress[event.call_id] = egress_summary(event.data["egress"])

    def _call_settled(self, event: Event) -> None:
        row = self._call(event.call_id)
        outcome = str(event.data.get("outcome"))
        if event.session_id == self._top:
            self._tally[outcome] = self._tally.get(outcome, 0) + 1
        if event.call_id is not None:
            self._settled_ids.append(event.call_id)
        if event.data.get("block_kind") == "denied":
            self._denied.append(
                {
                    "session_id": event.session_id,
                    "call_id": event.call_id,
                    "model_call_id": row.get("model_call_id"),
                    "tool": event.data.get("tool"),
                    "arguments": row.get("arguments"),
                }
            )
        self.emit(
            "call.settled",
            session_id=event.session_id,
            call_id=event.call_id,
            model_call_id=row.get("model_call_id"),
            index=event.data.get("index"),
            tool=event.data.get("tool"),
            arguments=row.get("arguments"),
            declaration=row.get("declaration"),
            outcome=outcome,
            block_kind=event.data.get("block_kind"),
            attempts=row.get("attempts"),
            exit_status=self._exit_status.pop(event.call_id or "", None),
            egress=self._egress.pop(event.call_id or "", None),
            duration_ms=None if outcome == "blocked" else row.get("duration_ms"),
            result=row.get("result"),
        )

    def _approval_asked(self, event: Event) -> None:
        self.emit(
            "approval.asked",
            session_id=event.session_id,
            call_id=event.call_id,
            tool=event.data.get("tool"),
            reason=event.data.get("reason"),
            approver=event.data.get("approver"),
        )

    def _approval_answered(self, event: Event) -> None:
        self.emit(
            "approval.answered",
            session_id=event.session_id,
            call_id=event.call_id,
            tool=event.data.get("tool"),
            decision=event.data.get("decision"),
        )

    def _compacted(self, event: Event) -> None:
        self.emit(
            "compaction",
            session_id=event.session_id,
            number=event.data.get("number"),
            reason=event.data.get("reason"),
            replaced=event.data.get("replaced"),
            summary=event.data.get("summary"),
        )

    def _dispatch_started(self, event: Event) -> None:
        if event.session_id == self._top:
            self._clock.start("tools")

    def _dispatch_finished(self, event: Event) -> None:
        if event.session_id == self._top:
            self._clock.stop("tools")

    def _turn_finished(self, event: Event) -> None:
        if event.session_id == self._top:
            self._clock.stop("model")  # a failed model request ends the turn

    def _recovery(self, event: Event) -> None:
        self.emit(
            "recovery",
            session_id=event.session_id,
            attempt=event.data.get("attempt"),
            call_ids=event.data.get("call_ids"),
            text=event.data.get("text"),
        )


_HANDLERS: dict[str, Callable[[HeadlessWriter, Event], None]] = {
    "agent.step": HeadlessWriter._step_started,  # pyright: ignore[reportPrivateUsage]
    "agent.reply": HeadlessWriter._reply,  # pyright: ignore[reportPrivateUsage]
    "call.started": HeadlessWriter._call_started,  # pyright: ignore[reportPrivateUsage]
    "call.finished": HeadlessWriter._call_finished,  # pyright: ignore[reportPrivateUsage]
    "call.result": HeadlessWriter._call_settled,  # pyright: ignore[reportPrivateUsage]
    "approval.requested": HeadlessWriter._approval_asked,  # pyright: ignore[reportPrivateUsage]
    "approval.decided": HeadlessWriter._approval_answered,  # pyright: ignore[reportPrivateUsage]
    "agent.recovery": HeadlessWriter._recovery,  # pyright: ignore[reportPrivateUsage]
    "dispatch.started": HeadlessWriter._dispatch_started,  # pyright: ignore[reportPrivateUsage]
    "dispatch.finished": HeadlessWriter._dispatch_finished,  # pyright: ignore[reportPrivateUsage]
    "agent.finished": HeadlessWriter._turn_finished,  # pyright: ignore[reportPrivateUsage]
    "agent.compacted": HeadlessWriter._compacted,  # pyright: ignore[reportPrivateUsage]
}
