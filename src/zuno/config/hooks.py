"""The ``hooks`` section of ``zuno.json``: the commands run around calls, approvals and sessions.

Plain settings: the configuration (:class:`zuno.config.loading.Config`) holds them,
and :mod:`zuno.policy.hooks` runs them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

__all__ = ["HookCommand", "HookSettings"]


class _Section(BaseModel):
    # strict: "yes" is not a boolean and "8" not a number; a file says what it means.
    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


class HookCommand(_Section):
    """A command run by a hook; it gets its payload as JSON on stdin.

    Before and after hooks answer on stdout with a JSON object such as
    ``{"decision": "allow" | "deny" | "ask", "arguments": {...}, "reason": "..."}``
    (after hooks: ``allow`` or ``deny``, and ``context``); empty output allows.
    Approval and session hooks only observe: their output is ignored.
    """

    command: str = Field(min_length=1)
    timeout: float = Field(default=10.0, gt=0, le=600)
    tools: list[str] | None = None
    """Only calls to these tools (all when omitted); not for session hooks."""
    fail: Literal["closed", "open"] = "closed"
    """What a before or after hook that errs, answers nonsense or times out does:
    ``closed`` denies (before: the call is blocked; after: its result is withheld),
    ``open`` is ignored. Either way a ``hook.failed`` event records it."""
    sandbox: bool = True
    """Run confined, like ``shell`` (no secrets in the environment). ``false`` opts
    out, and is honoured only in the user's own file."""
    network: bool = False
    """Whether the confined program may use the network."""

    _from_workspace: bool = PrivateAttr(default=False)

    @property
    def from_workspace(self) -> bool:
        """Whether this entry comes from the workspace's (trusted) ``zuno.json``."""
        return self._from_workspace

    def mark_from_workspace(self) -> None:
        """Record that this entry comes from the workspace's trusted ``zuno.json``."""
        self._from_workspace = True


_OBSERVERS = ("approval_asked", "approval_answered", "session_start", "session_end")


class HookSettings(_Section):
    """Hooks by the moment they run at (see :mod:`zuno.policy.hooks`)."""

    before: list[HookCommand] = Field(default_factory=lambda: [])
    """Before each call: may allow, deny, ask, or rewrite its arguments."""
    after: list[HookCommand] = Field(default_factory=lambda: [])
    """After each call: may withhold its result or add context for the model."""
    approval_asked: list[HookCommand] = Field(default_factory=lambda: [])
    """When a call is put to the approver (tool, arguments, reason)."""
    approval_answered: list[HookCommand] = Field(default_factory=lambda: [])
    """When the approver answered (the same, and the decision)."""
    session_start: list[HookCommand] = Field(default_factory=lambda: [])
    """When this process starts holding a session (created or resumed)."""
    session_end: list[HookCommand] = Field(default_factory=lambda: [])
    """When this process lets a session go."""

    @model_validator(mode="after")
    def _observers_only_observe(self) -> HookSettings:
        for phase in _OBSERVERS:
            for number, hook in enumerate(getattr(self, phase)):
                where = f"hooks.{phase}[{number}]"
                if "fail" in hook.model_fields_set:
                    raise ValueError(
                        f"{where}: `fail` applies to before and after hooks only; "
                        f"{phase} hooks observe, and their failures never stop anything"
                    )
                if hook.tools is not None and phase.startswith("session"):
                    raise ValueError(f"{where}: `tools` does not apply to session hooks")
        return self
