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

# Not even typing at run time: the ``zuno`` launcher (zuno.cli.launcher) imports this
# package first and hands most commands to a server within a few milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from zuno.config.agents import AgentSettings
    from zuno.config.loading import Config, ConfigError, load_config
    from zuno.config.permission import PermissionRule
    from zuno.contract.events import Event
    from zuno.contract.output import OutputLimits
    from zuno.contract.tool import (
        Tool,
        ToolArgs,
        ToolContext,
        ToolError,
        ToolResult,
        TransientError,
        UncertainOutcome,
    )
    from zuno.core.declarations import BlockKind, Concurrency, Declaration, Effect, Outcome, Replay
    from zuno.core.installed import installed_version
    from zuno.dispatch.dispatcher import CallRequest, CallResult
    from zuno.dispatch.session_state import SessionState
    from zuno.durability.store import open_store
    from zuno.policy.approvals import (
        ApprovalDecision,
        ApprovalRequest,
        ApproveAll,
        Approver,
        CallbackApprover,
        DenyAll,
    )
    from zuno.policy.hooks import HookCall, HookDecision
    from zuno.policy.terminal_approver import TerminalApprover
    from zuno.session.lifecycle import UnknownSession
    from zuno.session.runtime import Runtime, UnknownAgent

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
    "AgentSettings": "zuno.config.agents",
    "ApprovalDecision": "zuno.policy.approvals",
    "ApprovalRequest": "zuno.policy.approvals",
    "ApproveAll": "zuno.policy.approvals",
    "Approver": "zuno.policy.approvals",
    "BlockKind": "zuno.core.declarations",
    "CallRequest": "zuno.dispatch.dispatcher",
    "CallResult": "zuno.dispatch.dispatcher",
    "CallbackApprover": "zuno.policy.approvals",
    "Concurrency": "zuno.core.declarations",
    "Config": "zuno.config.loading",
    "ConfigError": "zuno.config.loading",
    "Declaration": "zuno.core.declarations",
    "DenyAll": "zuno.policy.approvals",
    "Effect": "zuno.core.declarations",
    "Event": "zuno.contract.events",
    "HookCall": "zuno.policy.hooks",
    "HookDecision": "zuno.policy.hooks",
    "Outcome": "zuno.core.declarations",
    "OutputLimits": "zuno.contract.output",
    "PermissionRule": "zuno.config.permission",
    "Replay": "zuno.core.declarations",
    "Runtime": "zuno.session.runtime",
    "SessionState": "zuno.dispatch.session_state",
    "TerminalApprover": "zuno.policy.terminal_approver",
    "Tool": "zuno.contract.tool",
    "ToolArgs": "zuno.contract.tool",
    "ToolContext": "zuno.contract.tool",
    "ToolError": "zuno.contract.tool",
    "ToolResult": "zuno.contract.tool",
    "TransientError": "zuno.contract.tool",
    "UncertainOutcome": "zuno.contract.tool",
    "UnknownAgent": "zuno.session.runtime",
    "UnknownSession": "zuno.session.lifecycle",
    "installed_version": "zuno.core.installed",
    "load_config": "zuno.config.loading",
    "open_store": "zuno.durability.store",
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
