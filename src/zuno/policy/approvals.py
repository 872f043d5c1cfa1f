"""Approvals: what a call asked about carries to a person, and what comes back.

When authorization (:func:`zuno.policy.permissions.evaluate`) says ``ask``, the
dispatcher builds an :class:`ApprovalRequest` bound to that exact call (the
tool and its normalized arguments, :func:`~zuno.policy.permissions.fingerprint`)
and hands it to the runtime's :class:`Approver`. The answer is an
:class:`ApprovalDecision`, or an :class:`ApprovalAnswer` when the person said
more: words for the model with a denial, or a rule to keep for the session.

The approvers here need no one: :class:`DenyAll` (no terminal),
:class:`ApproveAll` (``--yes``) and :class:`CallbackApprover` (a program
embedding Zuno). The one that asks a person is
:class:`zuno.policy.terminal_approver.TerminalApprover`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from zuno.config.permission import PermissionRule
from zuno.core.declarations import Declaration

__all__ = [
    "ApprovalAnswer",
    "ApprovalDecision",
    "ApprovalRequest",
    "ApproveAll",
    "Approver",
    "CallbackApprover",
    "DenyAll",
    "answer_of",
]


class ApprovalDecision(StrEnum):
    """What a person (or program) said about one call."""

    APPROVE_ONCE = "once"
    APPROVE_SESSION = "session"
    """Approve this exact call (same tool, same arguments) for the rest of the session,
    or what the request's ``covers`` names (a webfetch: that host)."""
    DENY = "deny"
    ACCEPT_EDITS = "accept-edits"
    """Approve this call once and switch the session to ``accept-edits`` mode: file
    edits inside the workspace are not asked about again."""


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    """A decision with what came with it: the person's words, or a rule they chose.

    An approver may return this instead of a bare :class:`ApprovalDecision`.
    """

    decision: ApprovalDecision
    message: str = ""
    """What the person said for the model (a denial's reason); "" for nothing."""
    rule: PermissionRule | None = None
    """A rule the person chose ("always" generalised): it holds for the rest of the
    session (saving it to a configuration file is the approver's business)."""


def answer_of(answer: ApprovalDecision | ApprovalAnswer) -> ApprovalAnswer:
    """An approver's return value as an :class:`ApprovalAnswer`."""
    return answer if isinstance(answer, ApprovalAnswer) else ApprovalAnswer(answer)


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """One call waiting for approval."""

    session_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    declaration: Declaration
    preview: str
    reason: str
    fingerprint: str
    covers: str = "this exact call"
    """What approving for the session covers, in words ("this exact call", "fetches from
    docs.python.org")."""
    offers_accept_edits: bool = False
    """Whether the person is offered to answer "yes, and accept file edits from now on"
    (:attr:`ApprovalDecision.ACCEPT_EDITS`): a file edit asked about in strict mode."""
    network_hosts: tuple[str, ...] = ()
    """Hosts the call asks to reach beyond ``sandbox.network_allow`` (``proxy`` network
    mode). A yes grants them to this call only; "always" (:attr:`ApprovalDecision.
    APPROVE_SESSION`) to every command of the session, and a terminal may also save
    them to the user's ``sandbox.network_allow``."""


class Approver(Protocol):
    """Decides approval requests. Implementations must be safe to call concurrently.

    ``decide`` returns a decision, or an :class:`ApprovalAnswer` when the person
    said more (why not, or a rule to keep).
    """

    name: str

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision | ApprovalAnswer:
        """The answer to one request."""
        ...


class DenyAll:
    """No one to ask: every request is denied (the default without a terminal)."""

    name = "deny (no terminal)"

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        """Deny."""
        return ApprovalDecision.DENY


class ApproveAll:
    """Approves every request once (``--yes``)."""

    name = "approve all (--yes)"

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        """Approve once."""
        return ApprovalDecision.APPROVE_ONCE


Callback = Callable[
    [ApprovalRequest], "ApprovalDecision | bool | Awaitable[ApprovalDecision | bool]"
]


class CallbackApprover:
    """Approvals from a program embedding Zuno: a sync or async callable.

    The callable returns an :class:`ApprovalDecision`, or a bool (True approves once).
    """

    name = "callback"

    def __init__(self, callback: Callback) -> None:
        self._callback = callback

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        """What the callable says (awaited when it returns an awaitable)."""
        answer = self._callback(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, ApprovalDecision):
            return answer
        return ApprovalDecision.APPROVE_ONCE if answer else ApprovalDecision.DENY
