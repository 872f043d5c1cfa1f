"""Putting a call to the approver, and what its answer does.

A call the rules leave to a person (strict mode, a control file, a host
beyond the sandbox's list, a hook that asked) is put to the approver once.
A yes may be kept for the session, teach a rule or switch the session to
accept-edits; a no, or an approver that fails, blocks the call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zuno.contract.events import Event
from zuno.core.declarations import BlockKind
from zuno.dispatch.admission import Admitted, Blocked
from zuno.execution.sandbox.egress.grants import NETWORK_GRANTED
from zuno.policy.approvals import ApprovalAnswer, ApprovalDecision, ApprovalRequest, answer_of
from zuno.policy.hooks import HookNotice, failure_event
from zuno.policy.permissions import Verdict, fingerprint_of

if TYPE_CHECKING:
    from zuno.dispatch.host import DispatchHost
    from zuno.dispatch.session_state import SessionState

__all__ = ["ask_approver"]


async def ask_approver(
    host: DispatchHost, session: SessionState, call: Admitted, verdict: Verdict
) -> None:
    """Put the call to the approver; a no (or a failing approver) blocks it."""
    call.asked = True  # this call is not put to the approver twice (see Preflight.admit)
    scope = call.tool.session_scope(call.args)
    if scope is None:
        key, covers = call.args_hash, "this exact call"
    else:
        # A wider approval (webfetch: a host) is stored under its scope, not the call.
        key, covers = fingerprint_of(call.tool.name, "\0scope\0" + scope[0]), scope[1]
    if host.store.has_session_approval(session.session_id, key):
        return
    try:
        preview = call.tool.preview(call.args, host.workspace)
    except Exception as exc:
        preview = f"(no preview: {exc})"
    hosts = call.tool.network_hosts(call.args, host.config)
    request = ApprovalRequest(
        session.session_id,
        call.call_id,
        call.tool.name,
        call.normalized,
        call.declaration,
        preview,
        verdict.reason,
        key,
        covers,
        # The prompt offers to stop asking about edits, where that would have.
        offers_accept_edits=call.tool.writes_files and session.permissions.mode == "strict",
        network_hosts=hosts,
    )
    host.events.emit(
        Event(
            "approval.requested",
            session.session_id,
            call.call_id,
            {"tool": call.tool.name, "reason": verdict.reason, "approver": host.approver.name},
        )
    )
    facts: dict[str, Any] = {
        "call_id": call.call_id,
        "tool": call.tool.name,
        "arguments": call.normalized,
        "declaration": call.declaration.as_dict(),
        "reason": verdict.reason,
        "approver": host.approver.name,
    }
    await _notice(
        host, HookNotice("approval_asked", session.session_id, facts, call.tool.name), call.call_id
    )
    try:
        answer = answer_of(await host.approver.decide(request))
    except Exception as exc:  # an approver that breaks must not approve
        answer = ApprovalAnswer(ApprovalDecision.DENY)
        verdict_note = f"the approver failed ({exc!r})"
    else:
        verdict_note = ""
    decision = answer.decision
    decided: dict[str, Any] = {"tool": call.tool.name, "decision": decision.value}
    if answer.message:
        decided["message"] = answer.message
    if answer.rule is not None:
        decided["rule"] = answer.rule.model_dump()
    host.events.emit(Event("approval.decided", session.session_id, call.call_id, decided))
    await _notice(
        host,
        HookNotice(
            "approval_answered",
            session.session_id,
            {**facts, "decision": decision.value},
            call.tool.name,
        ),
        call.call_id,
    )
    if decision is ApprovalDecision.APPROVE_SESSION or (
        decision is ApprovalDecision.APPROVE_ONCE and call.tool.scope_approved_once
    ):
        host.store.add_session_approval(session.session_id, key, call.tool.name)
    if hosts and decision is ApprovalDecision.APPROVE_SESSION:
        # The hosts hold for every later command of the session (a yes: this call only).
        host.events.emit(
            Event(
                NETWORK_GRANTED,
                session.session_id,
                call.call_id,
                {"hosts": list(hosts), "scope": "session"},
            )
        )
    if answer.rule is not None and decision is not ApprovalDecision.DENY:
        rules = [answer.rule, *session.permissions.rules]
        session.permissions = session.permissions.model_copy(update={"rules": rules})
    if decision is ApprovalDecision.ACCEPT_EDITS:
        host.set_mode(session, "accept-edits")  # this call was approved in the mode it was asked
    if decision is ApprovalDecision.DENY:
        who = verdict_note or (
            "no one was available to approve it (non-interactive run)"
            if host.approver.name.startswith("deny")
            else "the user denied it"
        )
        if answer.message:
            who += f", saying: {answer.message.strip()}"
        raise Blocked(
            BlockKind.DENIED,
            f"this call needed approval ({verdict.reason}) and {who}. "
            "Do not retry it unchanged; ask the user or take another approach",
            call.declaration,
        )


async def _notice(host: DispatchHost, notice: HookNotice, call_id: str | None) -> None:
    """Tell the observing hooks; a failure among them is recorded and stops nothing."""
    for failed in await host.hooks.notify(notice):
        host.events.emit(failure_event(notice.session_id, call_id, notice.phase, failed))
