"""What goes into the dispatcher and what comes out: call requests and results."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zuno.contract.images import ImageAttachment
from zuno.core.declarations import BlockKind, Declaration, Outcome
from zuno.core.sentences import full_stop

__all__ = ["CallRequest", "CallResult", "blocked_text", "new_id"]


def new_id(prefix: str) -> str:
    """A sortable unique id: time in microseconds, then randomness."""
    return f"{prefix}_{time.time_ns() // 1000:013x}{os.urandom(4).hex()}"


def blocked_text(kind: BlockKind, reason: str, after: str) -> str:
    """What a model reads of a blocked call: ``Blocked (kind): reason. after``.

    A reason that already ends a sentence gets no second full stop.
    """
    return f"Blocked ({kind.value}): {full_stop(reason)} {after}"


@dataclass(frozen=True, slots=True)
class CallRequest:
    """A tool call as the model (or a person) asked for it.

    ``arguments`` may be the model's raw JSON text, an object, or None.
    """

    tool: str
    arguments: str | Mapping[str, Any] | None = None
    model_call_id: str | None = None


@dataclass(slots=True)
class CallResult:
    """The settled result of one call, as handed back to the model."""

    call_id: str
    session_id: str
    index: int
    tool: str
    outcome: Outcome
    output: str
    declaration: Declaration | None = None
    block_kind: BlockKind | None = None
    attempt: int = 1
    is_error: bool = False
    data: dict[str, Any] | None = None
    model_call_id: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    artifact: str | None = None
    images: tuple[ImageAttachment, ...] = ()
    """Images handed to the model beside ``output`` (their bytes are artifacts)."""
    step: int = 0
    """The dispatch step the call ran in (its rows' ``step``); 0 until the dispatcher sets it."""

    def as_dict(self) -> dict[str, Any]:
        """The shape printed by ``zuno call --json``."""
        decl = self.declaration.as_dict() if self.declaration else {}
        return {
            "call_id": self.call_id,
            "session_id": self.session_id,
            "index": self.index,
            "tool": self.tool,
            "outcome": self.outcome.value,
            "block_kind": self.block_kind.value if self.block_kind else None,
            "effect": decl.get("effect"),
            "replay": decl.get("replay"),
            "concurrency": decl.get("concurrency"),
            "attempt": self.attempt,
            "result": self.output,
            "is_error": self.is_error,
            "data": self.data,
            "artifact": self.artifact,
            "images": [image.model_dump() for image in self.images],
        }
