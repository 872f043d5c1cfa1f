"""What pre-flight decides of a call: admitted, with all it learned, or blocked.

:mod:`zuno.dispatch.preflight` makes them; the dispatcher runs the admitted
calls and records the blocked ones, of which nothing ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from zuno.contract.calls import CallRequest
from zuno.contract.tool import Tool
from zuno.core.declarations import BlockKind, Declaration
from zuno.policy.hooks import Rewrite

__all__ = ["Admitted", "Blocked"]


@dataclass(slots=True)
class Admitted:
    """A call that passed pre-flight: resolved, validated, classified and authorized."""

    index: int
    call_id: str
    request: CallRequest
    tool: Tool[Any]
    args: BaseModel
    declaration: Declaration
    arguments_json: str
    args_hash: str
    normalized: dict[str, Any] = field(default_factory=lambda: {})
    rewrites: list[Rewrite] = field(default_factory=lambda: [])
    """The before hooks' changes to the model's arguments, in order (empty: none)."""
    hook_ask: str | None = None
    """Why a before hook wants the approver to decide this call (None: no hook asked)."""
    asked: bool = False
    """The approver (or a session approval) has already let this call through."""
    mode: str | None = None
    """The session's permission mode when the call was authorized (written on its row)."""


class Blocked(Exception):
    """Pre-flight refused a call: its kind and what to tell the model."""

    def __init__(
        self,
        kind: BlockKind,
        message: str,
        declaration: Declaration | None = None,
        arguments: str | None = None,
    ):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.declaration = declaration
        self.arguments = arguments
        """The arguments judged, as stored text, when not the model's (a hook rewrote them)."""
