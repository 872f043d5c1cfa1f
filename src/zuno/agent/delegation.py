"""Child agents: what ``task`` and ``council_run`` have in common.

A child agent runs in a session of its own, linked to the call that started
it (``parent_call_id``), one level deeper than its parent, with at most the
tools its parent has: the child's surface is the intersection of the parent's
surface, the child agent's own surface and any narrower list asked for. Every
call the child makes goes through the dispatcher again and is authorized on
its own; approving the delegation approves none of the child's effects.

A delegation the parent cannot give (an unknown agent, tools it lacks, past
:data:`MAX_DEPTH`) is refused before anything starts, with
:class:`~zuno.contract.tool.ArgumentsRejected`: the call is ``blocked:
invalid_arguments``, not a failure.

At most ``concurrency.delegations`` children run at once (the runtime's
``delegations`` limiter). A parent that is itself a child lends its slot to
its own children while it waits for them, so nested delegation cannot
deadlock on the bound: only agents that are actually working hold a slot.
"""

from __future__ import annotations

import weakref
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from zuno.agent.loop import AgentLoop, TurnOutcome, provider_for
from zuno.agent.providers import ProviderError
from zuno.contract.tool import ArgumentsRejected, ToolError

if TYPE_CHECKING:
    from zuno.dispatch.session_state import SessionState
    from zuno.session.runtime import Runtime

__all__ = ["MAX_DEPTH", "ChildRun", "check_depth", "child_tools", "run_child", "session_model"]

MAX_DEPTH = 3
"""How deep delegation may nest: the agent the user runs is depth 0."""


@dataclass(frozen=True, slots=True)
class ChildRun:
    """A finished child agent.

    Attributes:
        session_id: The child's own session (its transcript).
        agent: The child agent's name.
        model: The model it ran on.
        outcome: How its turn ended.
    """

    session_id: str
    agent: str
    model: str
    outcome: TurnOutcome


def session_model(runtime: Runtime, session: SessionState) -> str | None:
    """The model a session was opened with, as stored."""
    record = runtime.store.get_session(session.session_id)
    return record.model if record is not None else None


def check_depth(parent: SessionState) -> int:
    """The depth a child of ``parent`` would have.

    Raises:
        ArgumentsRejected: That is deeper than :data:`MAX_DEPTH`.
    """
    depth = parent.depth + 1
    if depth > MAX_DEPTH:
        raise ArgumentsRejected(
            f"delegation is limited to {MAX_DEPTH} levels and this agent is already at "
            f"depth {parent.depth}; do the work yourself"
        )
    return depth


def child_tools(
    runtime: Runtime, parent: SessionState, agent: str, requested: Sequence[str] | None
) -> list[str]:
    """The tools of a child: parent's surface, child agent's surface and ``requested``, intersected.

    Raises:
        ArgumentsRejected: ``agent`` is unknown, or ``requested`` names a tool
            the parent does not have.
    """
    mine = parent.surface.names
    if requested is not None:
        foreign = [name for name in requested if name not in mine]
        if foreign:
            raise ArgumentsRejected(
                f"tools {', '.join(foreign)} are not among your own tools; a delegation can "
                f"only narrow them. Your tools: {', '.join(mine)}"
            )
    try:
        theirs = runtime.surface(agent).names
    except LookupError as exc:  # UnknownAgent, with the known names
        raise ArgumentsRejected(str(exc).strip("\"'")) from exc
    wanted = set(requested) if requested is not None else None
    return [name for name in theirs if name in mine and (wanted is None or name in wanted)]


@dataclass(slots=True)
class _Slots:
    """Who holds a delegation slot, and which parents lent theirs out."""

    held: dict[str, object] = field(default_factory=lambda: {})
    lent: dict[str, object] = field(default_factory=lambda: {})
    waiting_on: dict[str, int] = field(default_factory=lambda: {})


_SLOTS: weakref.WeakKeyDictionary[Runtime, _Slots] = weakref.WeakKeyDictionary()


@asynccontextmanager
async def _slot(runtime: Runtime, parent_id: str, child_id: str) -> AsyncGenerator[None]:
    slots = _SLOTS.setdefault(runtime, _Slots())
    limiter = runtime.delegations
    slots.waiting_on[parent_id] = slots.waiting_on.get(parent_id, 0) + 1
    if slots.waiting_on[parent_id] == 1 and parent_id in slots.held:
        token = slots.held.pop(parent_id)
        limiter.release_on_behalf_of(token)
        slots.lent[parent_id] = token
    token = object()
    try:
        await limiter.acquire_on_behalf_of(token)
        slots.held[child_id] = token
        try:
            yield
        finally:
            if slots.held.pop(child_id, None) is not None:
                limiter.release_on_behalf_of(token)
    finally:
        slots.waiting_on[parent_id] -= 1
        if slots.waiting_on[parent_id] == 0:
            del slots.waiting_on[parent_id]
            lent = slots.lent.pop(parent_id, None)
            if lent is not None:
                # The parent goes back to work: it takes a slot again first.
                await limiter.acquire_on_behalf_of(lent)
                slots.held[parent_id] = lent


async def run_child(
    runtime: Runtime,
    parent: SessionState,
    *,
    call_id: str,
    agent: str,
    prompt: str,
    tools: Sequence[str],
    model: str | None = None,
    title: str | None = None,
    system: str | None = None,
) -> ChildRun:
    """Run ``prompt`` as one turn of ``agent`` in a new child session of ``parent``.

    Args:
        runtime: The runtime (the one dispatcher every child call goes through).
        parent: The delegating session.
        call_id: The delegating call; the child session is linked to it.
        agent: The child agent's name.
        prompt: The objective, as the child's user message.
        tools: The child's tools (see :func:`child_tools`).
        model: The model; default the agent's, else the parent session's, else ``model``.
        title: A title for the child session.
        system: Replaces the body of the agent's system prompt.

    Raises:
        ArgumentsRejected: Too deep; nothing was started.
        ToolError: No usable model; nothing was started.
    """
    depth = check_depth(parent)
    try:
        settings = runtime.agent_settings(agent)
    except LookupError as exc:  # UnknownAgent, with the known names
        raise ToolError(str(exc).strip("\"'")) from exc
    chosen = model or settings.model or session_model(runtime, parent) or runtime.config.model
    if not chosen:
        raise ToolError(
            f"no model for agent {agent!r}: set agents.{agent}.model or model in zuno.json"
        )
    try:
        provider = provider_for(runtime, chosen)
    except ProviderError as exc:
        raise ToolError(f"agent {agent!r} cannot start: {exc}") from exc
    try:
        session = runtime.open_session(
            agent=agent,
            parent_call_id=call_id,
            model=chosen,
            title=title,
            tools=tools,
            depth=depth,
            # A child works in its parent's permission mode (the user chose it for the
            # session), unless its agent configures permissions of its own.
            mode=parent.permissions.mode if settings.permission is None else None,
        )
        async with _slot(runtime, parent.session_id, session.session_id):
            outcome = await AgentLoop(runtime, session, provider, system=system).run(prompt)
    finally:
        with anyio.CancelScope(shield=True):
            await provider.aclose()
    return ChildRun(session.session_id, agent, chosen, outcome)
