"""The startup error of an MCP server, importable without the MCP SDK.

The command line catches it around every command; importing it from
:mod:`zuno.mcp.client` would load the SDK (about a second) for commands that
never speak MCP.
"""

from __future__ import annotations

__all__ = ["McpServerError"]


class McpServerError(Exception):
    """An MCP server could not be started, connected or listed (a startup error)."""
