"""MCP in both directions.

- :mod:`zuno.mcp.client`: the configured servers' tools join the registry as
  ``mcp__<server>__<tool>``, failing closed (SideEffecting / Never / Exclusive)
  unless declared in ``zuno.json`` or annotated read-only by a trusted server.
- :mod:`zuno.mcp.server`: Zuno's active surface served over MCP (stdio or
  streamable HTTP), every call through the dispatcher.

Only the errors (and the one sentence the CLI's help quotes) are imported
eagerly; the rest loads on first use. The MCP SDK behind the client and server
takes about a second to import, which a command that speaks no MCP must not pay,
and the settings (pydantic models) are not needed to register the commands.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from zuno.mcp.errors import McpServerError

if TYPE_CHECKING:
    from zuno.mcp.client import McpConnection, McpServers, connect_mcp_servers
    from zuno.mcp.remote import DeclarationChoice, McpResourceTool, McpTool, choose_declaration
    from zuno.mcp.settings import McpServerSettings, McpSettings, McpToolDeclaration

__all__ = [
    "APPROVAL_NOTE",
    "DeclarationChoice",
    "McpConnection",
    "McpResourceTool",
    "McpServerError",
    "McpServerSettings",
    "McpServers",
    "McpSettings",
    "McpTool",
    "McpToolDeclaration",
    "choose_declaration",
    "connect_mcp_servers",
]

APPROVAL_NOTE = (
    "Approvals cannot be asked over MCP, so what strict mode would ask is denied. "
    "To allow such calls, restart `zuno mcp serve --yes`, or allow this tool with a "
    "permission rule (permission.rules) in the user's own zuno.json (a workspace's "
    "zuno.json is honoured only once `zuno trust` trusted it)."
)
"""What a client of ``zuno mcp serve`` is told when strict mode denied its call."""

_LAZY = {
    "McpConnection": "zuno.mcp.client",
    "McpServers": "zuno.mcp.client",
    "connect_mcp_servers": "zuno.mcp.client",
    "DeclarationChoice": "zuno.mcp.remote",
    "McpResourceTool": "zuno.mcp.remote",
    "McpTool": "zuno.mcp.remote",
    "choose_declaration": "zuno.mcp.remote",
    "McpServerSettings": "zuno.mcp.settings",
    "McpSettings": "zuno.mcp.settings",
    "McpToolDeclaration": "zuno.mcp.settings",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'zuno.mcp' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
