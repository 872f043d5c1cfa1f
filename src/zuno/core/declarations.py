"""The three independent declarations of a tool call, and how a call can end.

Every tool call carries an :class:`Effect` (what it may change), a
:class:`Replay` policy (whether the runtime may ever run it again) and a
:class:`Concurrency` policy (whether it may overlap other calls). They are
declared separately on purpose: a call may be safe to overlap and still unsafe
to repeat. A tool that declares nothing gets the strict defaults
(SideEffecting / Never / Exclusive), so anything unknown fails closed.

A read-only call may also declare that it *observes* the authoritative state
(the workspace's files, the processes Zuno started). Only such calls satisfy
the inspection rule after a failure: reading Zuno's own bookkeeping (todos,
skills) or a web page says nothing about what a failed command changed. The
default is False, so an undeclared tool (an MCP tool included) never counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "INSPECTION",
    "READ_ONLY_SAFE_PARALLEL",
    "BlockKind",
    "Concurrency",
    "Declaration",
    "Effect",
    "Outcome",
    "Replay",
]


class Effect(StrEnum):
    """What an invocation may do to the world."""

    READ_ONLY = "read_only"
    """Observes state without changing it; never prompted."""
    USER_MEDIATED = "user_mediated"
    """Needs a human by design (a question); not an approval surface."""
    DELEGATING = "delegating"
    """Runs child work whose calls are each evaluated on their own."""
    SIDE_EFFECTING = "side_effecting"
    """The default: changes state or reaches outside; needs fresh approval in strict mode."""


class Replay(StrEnum):
    """Whether the runtime may run a call again after a failure."""

    NEVER = "never"
    """The default: at most once. A failure is handed to the model, never retried."""
    SAFE = "safe"
    """Read-only or idempotent inspection: may be attempted again after backoff."""


class Concurrency(StrEnum):
    """Whether a call may overlap other calls of the same model step."""

    EXCLUSIVE = "exclusive"
    """The default: a two-sided barrier. Earlier calls settle first; later ones wait."""
    PARALLEL_SAFE = "parallel_safe"
    """May overlap other non-exclusive calls, under ``concurrency.tool_calls``."""
    ISOLATED_BACKGROUND = "isolated_background"
    """Runs outside the foreground path; reachable through ``bg`` and ``job``."""


class Outcome(StrEnum):
    """How a call ended, as stored."""

    OK = "ok"
    ERROR = "error"
    """Process, transport or implementation failure: it ran and failed."""
    BLOCKED = "blocked"
    """Refused before anything ran; see :class:`BlockKind`."""
    UNCERTAIN = "uncertain"
    """The effect may or may not have happened (timeout, lost response, crash)."""


class BlockKind(StrEnum):
    """Why a call was refused. A blocked call changed nothing."""

    INVALID_ARGUMENTS = "invalid_arguments"
    UNAVAILABLE = "unavailable"
    DENIED = "denied"


@dataclass(frozen=True, slots=True)
class Declaration:
    """The declaration of one invocation. The defaults are the strict ones."""

    effect: Effect = Effect.SIDE_EFFECTING
    replay: Replay = Replay.NEVER
    concurrency: Concurrency = Concurrency.EXCLUSIVE
    observes: bool = False
    """Whether a read-only call looks at the workspace or processes (it can inspect)."""

    @property
    def inspects(self) -> bool:
        """Whether this call counts as an inspection of the real state: read-only and observing."""
        return self.observes and self.effect is Effect.READ_ONLY

    def as_dict(self) -> dict[str, str]:
        """The three policies as plain strings, for JSON output and storage."""
        return {
            "effect": self.effect.value,
            "replay": self.replay.value,
            "concurrency": self.concurrency.value,
        }


READ_ONLY_SAFE_PARALLEL = Declaration(Effect.READ_ONLY, Replay.SAFE, Concurrency.PARALLEL_SAFE)
"""Read-only lookups that do not observe the real state (skills, web pages, work state)."""

INSPECTION = Declaration(Effect.READ_ONLY, Replay.SAFE, Concurrency.PARALLEL_SAFE, observes=True)
"""Calls that look at the workspace or processes (read, glob, grep, lsp, job, bg list)."""
