"""Compaction: a long conversation replaced, for the model, by a summary the model writes.

A model reads at most its context window. When a session's last request
came near it (:data:`COMPACT_AT` of the window), the agent loop asks the
model, before its next step, to summarise the conversation so far; from then
on the model is sent that summary and what follows it, not the messages
before it. A person (``/compact``) can ask for the same at any time through
:func:`compact_session`.

Nothing is forgotten by the store: the ``messages`` table keeps every
message, and the summary is one more message in it, marked as a compaction
in its bookkeeping, so ``zuno show`` prints the whole conversation with the
summary where it was made. The summary request is a model reply like any
other for the session's usage and budget (an ``agent.reply`` event with
``"compaction": true``), and an ``agent.compacted`` event records the
summary, how many messages it replaced and why it was made.

The window of a model is ``models.NAME.context_window`` in ``zuno.json``,
else :data:`CONTEXT_WINDOWS`; a model known to neither is never compacted on
its own (``/compact`` still works).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from zuno.agent.messages import (
    META_KEY,
    AssistantMessage,
    Message,
    ToolSpec,
    UserMessage,
    stored_messages,
)
from zuno.agent.providers import Provider, ProviderError
from zuno.contract.events import Event
from zuno.policy.budget import price_for, step_cost

if TYPE_CHECKING:
    from zuno.config.loading import Config
    from zuno.dispatch.session_state import SessionState
    from zuno.policy.budget import Budget
    from zuno.session.runtime import Runtime

__all__ = [
    "COMPACTION_META",
    "COMPACT_AT",
    "CONTEXT_WINDOWS",
    "Compaction",
    "CompactionFailed",
    "compact_session",
    "context_window",
    "last_request_tokens",
    "model_view",
    "near_window",
]

COMPACT_AT = 0.8
"""The share of the context window a request may fill before the conversation is compacted."""

COMPACTION_META = "compaction"
"""The bookkeeping key (beside a stored message) that marks a summary; its value is the number."""

CONTEXT_WINDOWS: dict[str, int] = {
    "openai:gpt-5": 400_000,
    "openai:gpt-5-mini": 400_000,
    "openai:gpt-5-nano": 400_000,
    "openai:gpt-4.1": 1_047_576,
    "openai:gpt-4.1-mini": 1_047_576,
    "openai:gpt-4.1-nano": 1_047_576,
    "openai:gpt-4o": 128_000,
    "openai:gpt-4o-mini": 128_000,
    "openai:o3": 200_000,
    "openai:o4-mini": 200_000,
    "anthropic:claude-opus-4-1": 200_000,
    "anthropic:claude-opus-4-0": 200_000,
    "anthropic:claude-sonnet-4-5": 200_000,
    "anthropic:claude-sonnet-4-0": 200_000,
    "anthropic:claude-haiku-4-5": 200_000,
    "anthropic:claude-3-5-haiku-latest": 200_000,
}
"""Context windows of common models, in tokens (``models`` in zuno.json wins)."""

_SUMMARY_SYSTEM = """\
You compact a coding agent's conversation. The conversation so far is about \
to be replaced by your summary: the agent will continue from it alone, so \
anything you leave out is lost to it.

Write, in plain text:
- The user's requests and constraints, in their own words where it matters.
- What has been done: files read and changed (with paths), commands run and \
what they showed, decisions taken and why.
- The current state: what works, what fails (exact error text when it \
matters), calls whose outcome was uncertain.
- What is left to do, in order, and the very next step.

Do not call tools. Do not greet or explain; write only the summary."""

_SUMMARY_REQUEST = (
    "Summarise the conversation above as instructed, so that the work can go on "
    "from your summary alone."
)

_SUMMARY_HEAD = (
    "[Zuno: the conversation before this point was compacted to save context. "
    "This is the summary the model wrote of it; the full transcript is kept in the store.]\n\n"
)


class CompactionFailed(Exception):
    """The summary could not be made (a model error, an empty reply, nothing to compact)."""


@dataclass(frozen=True, slots=True)
class Compaction:
    """One compaction of a session.

    Attributes:
        number: 1 for the session's first compaction, then 2, ...
        summary: The summary the model wrote.
        replaced: How many messages the summary stands for.
        reason: ``context`` (the window was nearly full) or ``requested``.
    """

    number: int
    summary: str
    replaced: int
    reason: str


def context_window(model: str, config: Config | None) -> int | None:
    """The context window of ``model`` (``PROVIDER:MODEL``) in tokens, or None when unknown."""
    if config is not None:
        settings = config.models.get(model)
        if settings is not None and settings.context_window is not None:
            return settings.context_window
    return CONTEXT_WINDOWS.get(model)


def near_window(tokens: int | None, window: int | None) -> bool:
    """Whether a request of ``tokens`` (prompt and reply) came near ``window``."""
    return tokens is not None and window is not None and tokens >= COMPACT_AT * window


def last_request_tokens(store: Any, session_id: str) -> int | None:
    """The size of the session's last model request, unless a compaction came after it."""
    rows = store.query(
        "SELECT kind, data FROM events WHERE session_id = ?"
        " AND kind IN ('agent.reply', 'agent.compacted') ORDER BY seq DESC LIMIT 1",
        (session_id,),
    )
    if not rows or rows[0][0] != "agent.reply":
        return None
    raw: Any = rows[0][1]
    try:
        data: Any = json.loads(raw) if isinstance(raw, str | bytes) else raw
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    values = cast(dict[str, Any], data)
    tokens_in, tokens_out = values.get("input_tokens"), values.get("output_tokens")
    if values.get("compaction") or not isinstance(tokens_in, int):
        return None
    return tokens_in + (tokens_out if isinstance(tokens_out, int) else 0)


def model_view(
    stored: list[tuple[Message, dict[str, Any]]],
) -> list[tuple[Message, dict[str, Any]]]:
    """What the model is sent of a stored conversation: from its last summary on."""
    for position in range(len(stored) - 1, -1, -1):
        if stored[position][1].get(COMPACTION_META):
            return stored[position:]
    return stored


async def compact_session(
    runtime: Runtime,
    session: SessionState,
    provider: Provider,
    *,
    system: str,
    tools: list[ToolSpec],
    reason: str = "requested",
    focus: str | None = None,
) -> Compaction:
    """Ask the model for a summary of the session's conversation and store it.

    The next turn of the session (through :class:`~zuno.agent.loop.AgentLoop`)
    sends the model the summary and what follows it. Call it between turns,
    never while a turn of the same session runs.

    Args:
        runtime: The runtime of the session.
        session: The session to compact.
        provider: The session's model provider (the summary is its reply).
        system: The agent's system prompt (``AgentLoop.system``).
        tools: The agent's tool specs (sent so the conversation's calls stay
            valid for the API; the model is told not to call any).
        reason: ``requested`` (a person asked) or ``context`` (the window).
        focus: What the summary should keep above all (``/compact FOCUS``).

    Raises:
        CompactionFailed: Nothing to compact, the model request failed, or the
            model wrote no summary. The conversation is left as it was.
    """
    store = runtime.store
    sid = session.session_id
    stored = stored_messages(store, sid)
    view = model_view(stored)
    history = [message for message, _meta in view]
    if not any(isinstance(m, AssistantMessage) for m in history):
        raise CompactionFailed(f"session {sid} has nothing to compact yet")
    ask = _SUMMARY_REQUEST + (f" Keep above all: {focus.strip()}" if focus else "")
    try:
        reply = await provider.complete(
            system + "\n\n" + _SUMMARY_SYSTEM, [*history, UserMessage(text=ask)], tools, None
        )
    except ProviderError as exc:
        raise CompactionFailed(f"the summary request failed: {exc}") from exc
    cost = step_cost(price_for(provider.label, runtime.config), reply.usage)
    budget: Budget | None = getattr(runtime, "budget", None)
    if budget is not None:
        budget.add(reply.usage, cost, provider.label)
    runtime.events.emit(
        Event(
            "agent.reply",
            sid,
            data={
                "step": None,
                "depth": session.depth,
                "text": reply.text[:2000],
                "tool_calls": [],
                "stop_reason": reply.stop_reason.value,
                "input_tokens": reply.usage.input_tokens,
                "output_tokens": reply.usage.output_tokens,
                "cached_input_tokens": reply.usage.cached_input_tokens,
                "model": provider.label,
                "cost_usd": cost,
                "compaction": True,
            },
        )
    )
    summary = reply.text.strip()
    if not summary:
        raise CompactionFailed("the model wrote an empty summary; the conversation is unchanged")
    number = 1 + sum(1 for _m, meta in stored if meta.get(COMPACTION_META))
    message = UserMessage(text=_SUMMARY_HEAD + summary)
    body = {**message.model_dump(mode="json"), META_KEY: {COMPACTION_META: number}}
    store.append_message(sid, message.role, body)
    runtime.events.emit(
        Event(
            "agent.compacted",
            sid,
            data={
                "number": number,
                "reason": reason,
                "replaced": len(view),
                "summary": summary,
                "model": provider.label,
            },
        )
    )
    return Compaction(number, summary, len(view), reason)
