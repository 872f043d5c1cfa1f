"""The ``permission`` section of ``zuno.json``: the mode and the rules a call is judged by.

Plain settings: the configuration (:class:`zuno.config.loading.Config`) and each
agent (:class:`zuno.config.agents.AgentSettings`) hold them, and
:mod:`zuno.policy.permissions` applies them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PermissionMode", "PermissionRule", "PermissionSettings"]


class _Section(BaseModel):
    # strict: "yes" is not a boolean and "8" not a number; a file says what it means.
    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


class PermissionRule(_Section):
    """One authorization rule.

    ``tool`` is a tool name or ``*``. ``pattern`` is matched against the tool's
    main argument: a glob on the workspace-relative path for file tools
    (``src/**``), a command prefix for ``shell`` (``git status``), a glob
    otherwise. ``*`` matches every call. Among the rules that match a call,
    deny beats ask beats allow.
    """

    tool: str = Field(min_length=1)
    pattern: str = "*"
    action: Literal["allow", "ask", "deny"]


PermissionMode = Literal["plan", "accept-edits", "strict", "permissive"]
"""How much a session may do without asking (see :mod:`zuno.policy.permissions`), strictest first.
"""


class PermissionSettings(_Section):
    """The permission mode and rules.

    ``plan`` runs only reads, questions and plan/todo/goal updates; ``accept-edits``
    lets file edits inside the workspace through without asking; ``strict`` (the
    default) asks for a fresh approval of every side-effecting or delegating call;
    ``permissive`` asks nothing. Deny rules deny in every mode.
    """

    mode: PermissionMode = "strict"
    rules: list[PermissionRule] = Field(default_factory=lambda: [])
    read_roots: list[str] = Field(default_factory=lambda: [])
    """Folders outside the workspace that read-only file tools (read, grep, glob,
    lsp) may read without asking in strict mode (``~`` is expanded)."""
