"""Zuno: the tool runtime for coding agents.

Every tool call goes through one dispatcher that decides what it may do
(:class:`Effect`), whether it may ever run again (:class:`Replay`) and whether
it may overlap other calls (:class:`Concurrency`), and records exactly what
happened in a durable store.

Errors a program embedding Zuno may see::

    ConfigError          a zuno.json that cannot be used (names file, key, value)
    RipgrepUnavailable   no rg >= 14: glob and grep cannot run (says how to install it)
    UnknownSession       no stored session has that id
    UnknownAgent         no agent has that name

Tools themselves signal :class:`ToolError`, :class:`TransientError` and
:class:`UncertainOutcome`; the dispatcher turns them into stored outcomes and
never lets them escape.
"""

# The package's public names load on first use (PEP 562): ``import zuno.cli`` must
# not pay for the runtime, the store and every pydantic model before typer even
# parses the command line. Type checkers see ordinary imports.
from __future__ import annotations

# Not even typing at run time: the ``zuno`` launcher (zuno.launcher) imports this
# package first and hands most commands to a server within a few milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from zuno.config import AgentSettings, Config, ConfigError, PermissionRule, load_config
    from zuno.declarations import BlockKind, Concurrency, Declaration, Effect, Outcome, Replay
    from zuno.dispatch import CallRequest, CallResult
    from zuno.events import Event
    from zuno.hooks import HookCall, HookDecision
    from zuno.installed import installed_version
    from zuno.output import OutputLimits
    from zuno.permissions import (
        ApprovalDecision,
        ApprovalRequest,
        ApproveAll,
        Approver,
        CallbackApprover,
        DenyAll,
        TerminalApprover,
    )
    from zuno.runtime import Runtime, SessionState, UnknownAgent, UnknownSession
    from zuno.store import open_store
    from zuno.tool import (
        Tool,
        ToolArgs,
        ToolContext,
        ToolError,
        ToolResult,
        TransientError,
        UncertainOutcome,
    )

__all__ = [
    "AgentSettings",
    "ApprovalDecision",
    "ApprovalRequest",
    "ApproveAll",
    "Approver",
    "BlockKind",
    "CallRequest",
    "CallResult",
    "CallbackApprover",
    "Concurrency",
    "Config",
    "ConfigError",
    "Declaration",
    "DenyAll",
    "Effect",
    "Event",
    "HookCall",
    "HookDecision",
    "Outcome",
    "OutputLimits",
    "PermissionRule",
    "Replay",
    "Runtime",
    "SessionState",
    "TerminalApprover",
    "Tool",
    "ToolArgs",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "TransientError",
    "UncertainOutcome",
    "UnknownAgent",
    "UnknownSession",
    "installed_version",
    "load_config",
    "open_store",
]

_HOMES: dict[str, str] = {
    "AgentSettings": "zuno.config",
    "ApprovalDecision": "zuno.permissions",
    "ApprovalRequest": "zuno.permissions",
    "ApproveAll": "zuno.permissions",
    "Approver": "zuno.permissions",
    "BlockKind": "zuno.declarations",
    "CallRequest": "zuno.dispatch",
    "CallResult": "zuno.dispatch",
    "CallbackApprover": "zuno.permissions",
    "Concurrency": "zuno.declarations",
    "Config": "zuno.config",
    "ConfigError": "zuno.config",
    "Declaration": "zuno.declarations",
    "DenyAll": "zuno.permissions",
    "Effect": "zuno.declarations",
    "Event": "zuno.events",
    "HookCall": "zuno.hooks",
    "HookDecision": "zuno.hooks",
    "Outcome": "zuno.declarations",
    "OutputLimits": "zuno.output",
    "PermissionRule": "zuno.config",
    "Replay": "zuno.declarations",
    "Runtime": "zuno.runtime",
    "SessionState": "zuno.runtime",
    "TerminalApprover": "zuno.permissions",
    "Tool": "zuno.tool",
    "ToolArgs": "zuno.tool",
    "ToolContext": "zuno.tool",
    "ToolError": "zuno.tool",
    "ToolResult": "zuno.tool",
    "TransientError": "zuno.tool",
    "UncertainOutcome": "zuno.tool",
    "UnknownAgent": "zuno.runtime",
    "UnknownSession": "zuno.runtime",
    "installed_version": "zuno.installed",
    "load_config": "zuno.config",
    "open_store": "zuno.store",
}


def __getattr__(name: str) -> Any:
    """Import a public name's module the first time the name is used."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'zuno' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
