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

from zuno.config import AgentSettings, Config, ConfigError, PermissionRule, load_config
from zuno.declarations import BlockKind, Concurrency, Declaration, Effect, Outcome, Replay
from zuno.dispatch import CallRequest, CallResult
from zuno.events import Event
from zuno.hooks import HookCall, HookDecision
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
    "load_config",
    "open_store",
]
