"""The note a model is given after a call whose file changes can be undone.

A side-effecting call that ran with a checkpoint before it (or one still
being written) can be put back: the model is told how, with the ``undo`` tool
when it has it, else by naming the command a person types.
"""

from __future__ import annotations

from typing import Any

from zuno.contract.calls import CallResult
from zuno.core.declarations import Effect, Outcome

__all__ = ["undo_note"]


def undo_note(store: Any, result: CallResult, model_call_id: str, has_undo: bool) -> str:
    """What a model is told after a call that ran with a checkpoint before it ("" otherwise).

    Args:
        store: The store holding the call's row.
        result: The settled call.
        model_call_id: The id the model gave the call.
        has_undo: Whether the model has the ``undo`` tool (else the user is named).
    """
    declaration = result.declaration
    if declaration is None or declaration.effect is not Effect.SIDE_EFFECTING:
        return ""
    if result.outcome is Outcome.BLOCKED:
        return ""
    # A checkpoint still being written (the session's first look runs) counts too.
    rows = store.query(
        "SELECT 1 FROM calls WHERE call_id = ? AND snapshot IS NOT NULL"
        " UNION ALL SELECT 1 FROM events WHERE call_id = ? AND kind = 'checkpoint.pending'"
        " LIMIT 1",
        (result.call_id, result.call_id),
    )
    if not rows:
        return ""
    if has_undo:
        how = f'undo with {{"call": "{model_call_id}"}}'
    else:
        how = f"the user can undo it: zuno undo {result.call_id}"
    return f"\n[Zuno call {result.call_id}; any file changes it made can be undone: {how}]"
