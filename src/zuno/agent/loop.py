"""The turn loop: model step, dispatch, persist, next step.

One turn of an agent::

    user message                          persisted
    repeat (at most max_steps times):
        model step -> reply               streamed through on_text
        reply persisted                   (before anything of it runs)
        no tool calls?  -> the answer, the turn ends
        runtime.dispatch(reply's calls)   one batch, the one door
        results persisted, in call order

Everything the model saw is in the store's ``messages`` table, so a session
is rebuilt from SQL alone (:func:`load_history`) and can be resumed. A reply
whose calls were persisted but whose results were not (the process died in
between) is settled on load from the ``calls`` rows, never from prose: a
finished row gives its stored result, a ``started`` row is an uncertain
outcome, and no row means the call never reached the dispatcher.

A continued session (one that already has a conversation) first receives the
recovery notice of :mod:`zuno.durability.recovery`, when there is one: the Never calls
that failed or ended uncertain and were not yet reported, built from rows.

A provider failure ends the turn with its message; nothing is lost and the
session can be resumed. The loop itself never repeats a tool call.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from zuno.agent.compaction import (
    Compaction,
    CompactionFailed,
    compact_session,
    context_window,
    last_request_tokens,
    model_view,
    near_window,
)
from zuno.agent.instructions import instructions_prompt, project_instructions
from zuno.agent.messages import (
    META_KEY,
    AssistantMessage,
    Message,
    ModelReply,
    ToolResultMessage,
    UserMessage,
    stored_messages,
)
from zuno.agent.prompts import system_prompt
from zuno.agent.providers import Provider, ProviderConfigError, ProviderError, make_provider
from zuno.agent.tool_specs import tool_specs
from zuno.agent.undo_note import undo_note
from zuno.config.loading import AgentSettings, Config, user_config_path
from zuno.contract.events import Event
from zuno.contract.images import ImageAttachment, attachment_for, image_max_bytes
from zuno.dispatch.dispatcher import CallRequest, CallResult
from zuno.durability.memory import accepted_memories_text
from zuno.durability.store import Store
from zuno.durability.telemetry import model_span, turn_span
from zuno.policy.budget import price_for, session_budget, step_cost

if TYPE_CHECKING:
    from zuno.dispatch.session_state import SessionState
    from zuno.durability.store.records import CallRecord
    from zuno.policy.budget import Budget
    from zuno.session.runtime import Runtime

__all__ = [
    "DEFAULT_MAX_STEPS",
    "AgentLoop",
    "ModelNotConfigured",
    "ProviderFactory",
    "TurnOutcome",
    "TurnStatus",
    "load_history",
    "provider_for",
    "resolve_model",
    "tool_specs",
    "use_provider_factory",
]

DEFAULT_MAX_STEPS = 50
"""Model steps per turn when the agent sets no ``max_steps``."""

ProviderFactory = Callable[[str], Provider]
"""Makes the provider for a ``PROVIDER:MODEL`` string (see :func:`use_provider_factory`)."""

_FACTORIES: weakref.WeakKeyDictionary[Runtime, ProviderFactory] = weakref.WeakKeyDictionary()

# Loop bookkeeping stored beside each message; stripped before the model sees it.
_META = META_KEY


class ModelNotConfigured(ProviderConfigError):
    """No model was named anywhere: not on the command line, the agent or zuno.json."""


class TurnStatus(StrEnum):
    """How a turn ended."""

    ANSWERED = "answered"
    """The model replied without tool calls."""
    STEP_LIMIT = "step_limit"
    """The step limit was reached while the model still asked for tools."""
    PROVIDER_ERROR = "provider_error"
    """A model request failed (the session can be resumed)."""
    BUDGET = "budget"
    """The spending cap (``runtime.budget``) was reached, or cannot be kept, before a request."""


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """The end of one turn.

    Attributes:
        session_id: The session the turn ran in.
        status: How it ended.
        text: The final answer, or the last text the model produced.
        steps: Model steps taken in this turn.
        message: What a person should read when the status is not ``answered``.
    """

    session_id: str
    status: TurnStatus
    text: str
    steps: int
    message: str = ""

    @property
    def answered(self) -> bool:
        """Whether the model finished with an answer."""
        return self.status is TurnStatus.ANSWERED


def resolve_model(requested: str | None, agent: AgentSettings | None, config: Config) -> str:
    """The model of a run: ``--model``, else the agent's, else ``zuno.json``'s ``model``.

    Raises:
        ModelNotConfigured: None of the three names a model.
    """
    model = requested or (agent.model if agent is not None else None) or config.model
    if not model:
        raise ModelNotConfigured(
            "no model is configured. Pass --model PROVIDER:MODEL (such as openai:gpt-4o), "
            'or set "model" in zuno.json, or a model on the agent (agents.NAME.model).'
        )
    return model


def use_provider_factory(runtime: Runtime, factory: ProviderFactory | None) -> None:
    """Have the agents of ``runtime`` get their providers from ``factory`` (None: the config)."""
    if factory is None:
        _FACTORIES.pop(runtime, None)
    else:
        _FACTORIES[runtime] = factory


def provider_for(runtime: Runtime, model: str) -> Provider:
    """The provider for ``model``: from :func:`use_provider_factory` when set, else the config's."""
    factory = _FACTORIES.get(runtime)
    if factory is not None:
        return factory(model)
    return make_provider(model, runtime.config.providers)


def _dump(message: Message, meta: dict[str, Any]) -> dict[str, Any]:
    return {**message.model_dump(mode="json"), _META: meta}


def _stored(store: Store, session_id: str) -> list[tuple[Message, dict[str, Any]]]:
    return stored_messages(store, session_id)


def load_history(store: Store, session_id: str) -> list[Message]:
    """The conversation of a session as stored (without settling dangling calls)."""
    return [message for message, _meta in _stored(store, session_id)]


def _settle_text(row_outcome: str | None, row_result: str | None, status: str | None) -> str:
    if status is None:
        return (
            "Not run: the session stopped before this call reached the dispatcher. "
            "Nothing of it happened."
        )
    if status == "started":
        return (
            "Outcome uncertain: the session stopped while this call was running and no "
            "result was recorded. Its effect may or may not have happened; inspect the "
            "real state before doing anything that depends on it. It will not be run again."
        )
    return row_result or f"(outcome {row_outcome}, no output)"


def _row_images(row: CallRecord | None, config: Config) -> tuple[ImageAttachment, ...]:
    """The image of a finished ``read`` whose result message was lost, from its artifact.

    Only ``read`` keeps an image as its row's artifact; another tool's artifact
    is its full text output, whatever its bytes look like.
    """
    if row is None or row.status != "finished" or row.tool != "read" or not row.artifact:
        return ()
    saved = Path(row.artifact)
    try:
        data = saved.read_bytes()
    except OSError:
        return ()
    attached = attachment_for(data, saved, _read_path(row.arguments), image_max_bytes(config))
    return () if attached is None else (attached,)


def _read_path(arguments: str) -> str:
    """The ``path`` argument of a stored ``read`` call ("" when it cannot be told)."""
    try:
        value: Any = json.loads(arguments)
    except ValueError:
        return ""
    if not isinstance(value, dict):
        return ""
    path: Any = cast(dict[str, Any], value).get("path")
    return path if isinstance(path, str) else ""


class AgentLoop:
    """Runs turns of one agent in one session.

    Args:
        runtime: The runtime whose dispatcher every call goes through.
        session: The session (its agent and surface decide the tools).
        provider: The model provider.
        max_steps: Model steps per turn (default: the agent's ``max_steps``, else 50).
        on_text: Called with each streamed text delta of the model.
        system: Replaces the body of the agent's system prompt (the session's
            facts, such as the workspace and tools, are still added).
    """

    def __init__(
        self,
        runtime: Runtime,
        session: SessionState,
        provider: Provider,
        *,
        max_steps: int | None = None,
        on_text: Callable[[str], None] | None = None,
        system: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.session = session
        self.provider = provider
        agent_steps = session.agent.max_steps if session.agent is not None else None
        self.max_steps = max_steps or agent_steps or DEFAULT_MAX_STEPS
        self.on_text = on_text
        # Council members and the synthesis get a body of their own, and no project's say.
        self.instruction_files = (
            project_instructions(runtime.workspace, user_folder=user_config_path().parent)
            if system is None
            else []
        )
        self.system = system_prompt(
            session.agent_name,
            session.agent,
            workspace=runtime.workspace,
            tools=session.surface.names,
            depth=session.depth,
            body=system,
            memories=accepted_memories_text(runtime.store, runtime.workspace)
            if runtime.config.memory.enabled
            else "",
            instructions=instructions_prompt(self.instruction_files),
        )
        self._specs = tool_specs(session.surface)
        self._price = price_for(provider.label, runtime.config)
        self._window = context_window(provider.label, runtime.config)
        self._context_tokens: int | None = None
        self._steps_before = 0
        # While the model thinks, the first checkpoint's full look runs.
        runtime.dispatcher.prepare_checkpoints(session.surface.tools)

    # Persistence ------------------------------------------------------------

    def _append(self, history: list[Message], message: Message, **meta: Any) -> None:
        self.runtime.store.append_message(
            self.session.session_id, message.role, _dump(message, meta)
        )
        history.append(message)

    def _emit(self, kind: str, **data: Any) -> None:
        self.runtime.events.emit(Event(kind, self.session.session_id, data=data))

    def _queue(self, kind: str, **data: Any) -> None:
        """An event that rides with the store's next write (no commit of its own)."""
        event = Event(kind, self.session.session_id, data=data)
        self.runtime.store.append_events([event], deliver=self.runtime.events.deliver)

    def history(self) -> list[Message]:
        """The conversation the model is sent: from the last compaction summary on, with
        any dangling calls settled from SQL."""
        full = _stored(self.runtime.store, self.session.session_id)
        self._steps_before = sum(1 for m, _meta in full if isinstance(m, AssistantMessage))
        stored = model_view(full)
        offset = len(full) - len(stored)
        history = [message for message, _meta in stored]
        if not stored:
            return history
        replies = [i for i, (m, _meta) in enumerate(stored) if isinstance(m, AssistantMessage)]
        if not replies:
            return history
        last = stored[replies[-1]][0]
        assert isinstance(last, AssistantMessage)
        answered = {
            m.call_id for m, _meta in stored[replies[-1] + 1 :] if isinstance(m, ToolResultMessage)
        }
        missing = [c for c in last.tool_calls if c.id not in answered]
        if not missing:
            return history
        # The reply was persisted but (some of) its results were not: settle them from the rows.
        before = full[: offset + replies[-1]]
        seen = max((int(meta.get("dispatch_step", 0)) for _m, meta in before), default=0)
        rows = {
            row.model_call_id: row
            for row in self.runtime.store.calls(self.session.session_id)
            if row.step > seen and row.model_call_id is not None
        }  # later attempts overwrite earlier ones: rows come ordered by attempt
        for call in missing:
            row = rows.get(call.id)
            text = _settle_text(
                row.outcome if row else None,
                row.result if row else None,
                row.status if row else None,
            )
            result = ToolResultMessage(
                call_id=call.id,
                name=call.name,
                content=text,
                is_error=row is None or row.is_error,
                images=_row_images(row, self.runtime.config),
            )
            self._append(history, result, settled_from_store=True)
        return history

    # The turn -----------------------------------------------------------------

    async def run(self, prompt: str | None = None) -> TurnOutcome:
        """Run one turn: add ``prompt`` (if any) and step until an answer or the limit.

        Before each model request the runtime's budget, when it has one, is
        checked; a turn that reached it ends with ``TurnStatus.BUDGET``.

        Returns:
            How the turn ended; provider failures are reported here, not raised.
        """
        if self.session.depth == 0 and hasattr(self.runtime, "budget"):
            # The cap given now, else the one stored with the session (a resume keeps it).
            budget = session_budget(
                self.runtime.store, self.session.session_id, self.runtime.budget
            )
            self.runtime.budget = budget
            if budget is not None:
                # The count starts from what the session (and its children) already spent.
                budget.load(self.runtime.store, self.session.session_id, self.runtime.config)
        session = self.session
        with turn_span(
            session.session_id, session.agent_name, self.provider.label, session.depth
        ) as span:
            outcome = await self._turn(prompt)
            span.set({"zuno.turn.status": outcome.status.value, "zuno.turn.steps": outcome.steps})
            return outcome

    async def _turn(self, prompt: str | None) -> TurnOutcome:
        history = self.history()
        previous_steps = self._steps_before
        self._context_tokens = last_request_tokens(self.runtime.store, self.session.session_id)
        if near_window(self._context_tokens, self._window):
            # Before the new prompt, so the model reads the prompt itself, not a summary of it.
            history = await self._compact_for_context(history)
        if history:
            self._recovery_notice(history)
        if prompt is not None:
            self._append(history, UserMessage(text=prompt))
        self._emit(
            "agent.started",
            agent=self.session.agent_name,
            model=self.provider.label,
            depth=self.session.depth,
            max_steps=self.max_steps,
            instructions=[str(f.path) for f in self.instruction_files],
        )
        last_text = ""
        steps = 0
        while steps < self.max_steps:
            steps += 1
            number = previous_steps + steps
            stop = self._over_budget()
            if stop is not None:
                return self._finish(TurnStatus.BUDGET, last_text, steps - 1, stop)
            if near_window(self._context_tokens, self._window):
                history = await self._compact_for_context(history)
            # Committed with the step's reply (or whatever the store writes first).
            self._queue("agent.step", step=number, depth=self.session.depth)
            with model_span(self.session.session_id, self.provider.label, number) as span:
                try:
                    reply = await self.provider.complete(
                        self.system, history, self._specs, self.on_text
                    )
                except ProviderError as exc:
                    span.error(str(exc))
                    return self._finish(TurnStatus.PROVIDER_ERROR, last_text, steps - 1, str(exc))
                cost = self._account(reply)
                if reply.usage.input_tokens is not None:
                    self._context_tokens = reply.usage.input_tokens + (
                        reply.usage.output_tokens or 0
                    )
                span.set(
                    {
                        "gen_ai.usage.input_tokens": reply.usage.input_tokens,
                        "gen_ai.usage.output_tokens": reply.usage.output_tokens,
                        "zuno.cost_usd": cost,
                    }
                )
            if reply.text:
                last_text = reply.text
            # Intent before effect: the reply with its calls is stored before any runs;
            # its accounting event is committed in the same transaction.
            self._queue_reply(number, reply, cost)
            self._append(history, reply.as_message(), step=number)
            if not reply.tool_calls:
                return self._finish(TurnStatus.ANSWERED, reply.text, steps)
            results = await self.runtime.dispatch(
                self.session,
                [CallRequest(c.name, c.arguments, c.id) for c in reply.tool_calls],
            )
            self._append_results(history, reply, results)
            # A failed or uncertain Never call makes the next step a recovery turn.
            self._recovery_notice(history)
        message = (
            f"stopped after {self.max_steps} model steps: the step limit of agent "
            f"{self.session.agent_name!r} (max_steps in zuno.json, default {DEFAULT_MAX_STEPS}) "
            "was reached while the model was still calling tools"
        )
        return self._finish(TurnStatus.STEP_LIMIT, last_text, steps, message)

    # Compaction -------------------------------------------------------------

    async def compact(self, focus: str | None = None) -> Compaction:
        """Compact the session now (``/compact``); see :mod:`zuno.agent.compaction`.

        Raises:
            CompactionFailed: No summary could be made; the conversation is unchanged.
        """
        done = await compact_session(
            self.runtime,
            self.session,
            self.provider,
            system=self.system,
            tools=self._specs,
            focus=focus,
        )
        self._context_tokens = None
        return done

    async def _compact_for_context(self, history: list[Message]) -> list[Message]:
        """The last request came near the context window: compact before the next one."""
        if self._over_budget() is not None:
            return history  # no money for a summary: the step's own check stops the turn
        try:
            await compact_session(
                self.runtime,
                self.session,
                self.provider,
                system=self.system,
                tools=self._specs,
                reason="context",
            )
        except CompactionFailed as exc:
            # The turn goes on uncompacted; the model request says if it no longer fits.
            self._emit("agent.compaction_failed", message=str(exc))
            self._context_tokens = None
            return history
        self._context_tokens = None
        return self.history()

    def _recovery_notice(self, history: list[Message]) -> None:
        """A continued session first hears of its failed or uncertain Never calls, from SQL."""
        from zuno.durability.recovery import issue_notice, pending_notice

        notice = pending_notice(self.runtime.store, self.session.session_id)
        if notice is None:
            return
        self._append(history, UserMessage(text=notice.text), recovery_attempt=notice.attempt)
        issue_notice(self.runtime.store, notice)
        self._emit(
            "agent.recovery",
            attempt=notice.attempt,
            call_ids=[item.call_id for item in notice.items],
            text=notice.text,
        )

    def _over_budget(self) -> str | None:
        """Why the next model request must not be sent (the runtime's budget), or None."""
        budget: Budget | None = getattr(self.runtime, "budget", None)
        if budget is None:
            return None
        reason = budget.stop_reason(self.provider.label, self._price)
        if reason is None:
            return None
        if self.session.depth > 0:
            return f"stopped before the next model request: {reason}"
        sid = self.session.session_id
        if reason.startswith("the token budget"):
            fix = f"`zuno resume {sid} --max-tokens-budget N` continues it with a higher cap"
        elif self._price is None:
            fix = (
                f'set the price of {self.provider.label} in zuno.json ("models"), then '
                f"`zuno resume {sid}` continues it"
            )
        else:
            fix = f"`zuno resume {sid} --max-budget USD` continues it with a higher cap"
        return f"stopped before the next model request: {reason}. The session is saved; {fix}"

    def _account(self, reply: ModelReply) -> float | None:
        """The reply's cost (None: unknown), counted against the runtime's budget."""
        cost = step_cost(self._price, reply.usage)
        budget: Budget | None = getattr(self.runtime, "budget", None)
        if budget is not None:
            budget.add(reply.usage, cost, self.provider.label)
        return cost

    def _queue_reply(self, number: int, reply: ModelReply, cost: float | None) -> None:
        # The token counts, the model and the cost are what session totals and
        # budgets are summed from (zuno.policy.budget): one event per reply, durable.
        self._queue(
            "agent.reply",
            step=number,
            depth=self.session.depth,
            text=reply.text[:2000],
            tool_calls=[{"id": c.id, "name": c.name} for c in reply.tool_calls],
            stop_reason=reply.stop_reason.value,
            input_tokens=reply.usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
            cached_input_tokens=reply.usage.cached_input_tokens,
            model=self.provider.label,
            cost_usd=cost,
        )

    def _append_results(
        self, history: list[Message], reply: ModelReply, results: Sequence[CallResult]
    ) -> None:
        """The step's results, in call order, stored in one transaction."""
        step = results[0].step if results else 0
        by_index = {r.index: r for r in results}
        undo = self.session.surface.get("undo") is not None
        added: list[tuple[Message, dict[str, Any]]] = []
        for index, call in enumerate(reply.tool_calls):
            result = by_index.get(index)
            images: tuple[ImageAttachment, ...] = ()
            if result is None:  # the dispatcher answers every call; be safe anyway
                content, is_error, meta = "No result was recorded for this call.", True, {}
            else:
                content, is_error, images = result.output, result.is_error, result.images
                meta = {"call_id": result.call_id, "outcome": result.outcome.value}
                content += undo_note(self.runtime.store, result, call.id, undo)
            message = ToolResultMessage(
                call_id=call.id, name=call.name, content=content, is_error=is_error, images=images
            )
            added.append((message, {"dispatch_step": step, **meta}))
        self.runtime.store.append_messages(
            self.session.session_id, [(m.role, _dump(m, meta)) for m, meta in added]
        )
        history.extend(m for m, _meta in added)

    def _finish(self, status: TurnStatus, text: str, steps: int, message: str = "") -> TurnOutcome:
        self._emit(
            "agent.finished",
            status=status.value,
            steps=steps,
            depth=self.session.depth,
            message=message,
        )
        return TurnOutcome(self.session.session_id, status, text, steps, message)
