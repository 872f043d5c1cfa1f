"""After a call ran: the after hooks' say, and the notes the model is given.

The after hooks see the tool's own result. Each may add context for the
model or withhold the result; a before hook's rewrite of the arguments is
noted, so the model knows that what ran is not what it asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zuno.contract.events import Event
from zuno.policy.hooks import HookCall, context_note, failure_event, rewrite_note

if TYPE_CHECKING:
    from zuno.contract.calls import CallResult
    from zuno.dispatch.admission import Admitted
    from zuno.dispatch.host import DispatchHost
    from zuno.dispatch.session_state import SessionState

__all__ = ["after_hooks"]


async def after_hooks(
    host: DispatchHost, session: SessionState, call: Admitted, result: CallResult
) -> None:
    """What the model sees of a result: a rewrite's note, the after hooks' say and context.

    The hooks see the tool's own result; the note and their context are added after.
    """
    contexts: list[str] = []
    await _consult_after(host, session, call, result, contexts)
    # The model must know when what ran is not what it asked for.
    note = rewrite_note(call.rewrites, ran=True) if call.rewrites else ""
    result.output = note + result.output + "".join(contexts)


async def _consult_after(
    host: DispatchHost,
    session: SessionState,
    call: Admitted,
    result: CallResult,
    contexts: list[str],
) -> None:
    hooks = host.hooks
    if not hooks:
        return
    events = host.events
    for hook in hooks.chain("after", call.tool.name):
        decision = await hook.consult(
            HookCall(
                "after",
                session.session_id,
                call.call_id,
                call.tool.name,
                call.normalized,
                call.declaration.as_dict(),
                result.outcome.value,
                result.output,
            )
        )
        if decision.failed:
            events.emit(failure_event(session.session_id, call.call_id, "after", decision))
        if decision.context:
            events.emit(
                Event(
                    "hook.context",
                    session.session_id,
                    call.call_id,
                    {"hook": hook.label, "context": decision.context},
                )
            )
            contexts.append(context_note(hook.label, decision.context))
        if not decision.allow:
            events.emit(
                Event(
                    "hook.denied",
                    session.session_id,
                    call.call_id,
                    {"phase": "after", "hook": hook.label, "reason": decision.reason},
                )
            )
            result.output = (
                f"The call ran (outcome: {result.outcome.value}) but an after hook withheld "
                f"its result: {decision.reason}"
            )
            result.is_error = True
            return
