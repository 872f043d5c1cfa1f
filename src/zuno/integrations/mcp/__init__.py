"""MCP in both directions.

- :mod:`zuno.integrations.mcp.client`: the configured servers' tools join the registry as
  ``mcp__<server>__<tool>``, failing closed (SideEffecting / Never / Exclusive)
  unless declared in ``zuno.json`` or annotated read-only by a trusted server.
- :mod:`zuno.serve.mcp_server`: Zuno's active surface served over MCP (stdio or
  streamable HTTP), every call through the dispatcher.

Only the errors (and the one sentence the CLI's help quotes) are imported
eagerly; the rest loads on first use. The MCP SDK behind the client and server
takes about a second to import, which a command that speaks no MCP must not pay,
and the settings (pydantic models) are not needed to register the commands.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from zuno.integrations.mcp.errors import McpServerError

if TYPE_CHECKING:
    from zuno.config.mcp import McpServerSettings, McpSettings, McpToolDeclaration
    from zuno.integrations.mcp.client import McpConnection, McpServers, connect_mcp_servers
    from zuno.integrations.mcp.remote import (
        DeclarationChoice,
        McpResourceTool,
        McpTool,
        choose_declaration,
    )

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
    "McpConnection": "zuno.integrations.mcp.client",
    "McpServers": "zuno.integrations.mcp.client",
    "connect_mcp_servers": "zuno.integrations.mcp.client",
    "DeclarationChoice": "zuno.integrations.mcp.remote",
    "McpResourceTool": "zuno.integrations.mcp.remote",
    "McpTool": "zuno.integrations.mcp.remote",
    "choose_declaration": "zuno.integrations.mcp.remote",
    "McpServerSettings": "zuno.config.mcp",
    "McpSettings": "zuno.config.mcp",
    "McpToolDeclaration": "zuno.config.mcp",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'zuno.integrations.mcp' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
