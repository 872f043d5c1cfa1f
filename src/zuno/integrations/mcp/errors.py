"""The startup error of an MCP server, importable without the MCP SDK.

The command line catches it around every command; importing it from
:mod:`zuno.integrations.mcp.client` would load the SDK (about a second) for commands that
never speak MCP.
"""

from __future__ import annotations

__all__ = ["McpServerError"]


class McpServerError(Exception):
    """An MCP server could not be started, connected or listed (a startup error).

    Attributes:
        server: The server's name in ``mcp.servers`` (None when not known).
        summary: The failure on one line (the full message quotes the
            server's stderr and how to fix it, over several lines).
        reason: What went wrong, without the server's name or command
            (``failed to start: ...``), for lists already organised by server.
    """

    def __init__(
        self,
        message: str,
        *,
        server: str | None = None,
        summary: str | None = None,
        reason: str | None = None,
    ):
        super().__init__(message)
        self.server = server
        self.summary = summary or " ".join(message.split())
        self.reason = reason or self.summary
