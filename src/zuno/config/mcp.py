"""The ``mcp`` section of ``zuno.json``: which MCP servers to connect and how far to trust them.

::

    {
      "mcp": {
        "servers": {
          "github": {"command": "github-mcp", "args": ["--stdio"], "env": {"TOKEN": "..."}},
          "docs": {"url": "http://127.0.0.1:9000/mcp", "trusted": true},
          "db": {
            "command": "db-mcp",
            "tools": {"query": {"effect": "read_only", "replay": "safe"}}
          }
        }
      }
    }

A server is started as a subprocess (``command``, ``args``, ``env``, ``cwd``)
and spoken to over stdio, or reached over streamable HTTP (``url``). Its tools
fail closed: SideEffecting / Never / Exclusive, unless ``tools`` declares one
explicitly or the server is ``trusted`` and annotates it read-only.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from zuno.core.declarations import Concurrency, Effect, Replay

__all__ = ["McpServerSettings", "McpSettings", "McpToolDeclaration"]

_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}\Z")


class _Section(BaseModel):
    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class McpToolDeclaration(_Section):
    """An explicit declaration of one remote tool; a field left out keeps the strict default."""

    effect: Effect | None = None
    replay: Replay | None = None
    concurrency: Concurrency | None = None
    observes: bool = False
    """A read-only tool that looks at the workspace or processes: it satisfies the
    inspection rule after a failure. Only the configuration can say so."""


class McpServerSettings(_Section):
    """One MCP server: how to reach it and how far to trust it."""

    command: str | None = Field(default=None, min_length=1)
    """The program to start (stdio transport)."""
    args: list[str] = Field(default_factory=lambda: [])
    env: dict[str, str] = Field(default_factory=lambda: {})
    """Extra environment variables for the subprocess (added to a minimal safe set)."""
    cwd: str | None = None
    """Where the subprocess starts (default: the workspace)."""
    url: str | None = Field(default=None, min_length=1)
    """A streamable HTTP endpoint (``http://127.0.0.1:8000/mcp``)."""
    enabled: bool = True
    trusted: bool = False
    """Believe the server's read-only annotations (never its word on anything else)."""
    tools: dict[str, McpToolDeclaration] = Field(default_factory=lambda: {})
    """Explicit declarations, by the server's own tool name."""
    startup_timeout: float = Field(default=30.0, gt=0, le=600)
    """Seconds to start, connect and list tools before the server is a startup error."""
    call_timeout: float | None = Field(default=600.0, gt=0, le=86_400)
    """Seconds to wait for one call's answer; after that its outcome is uncertain."""
    sandbox: bool = True
    """Run confined, like ``shell`` (no secrets in the environment). ``false`` opts
    out, and is honoured only in the user's own file."""
    network: bool = False
    """Whether the confined server may use the network."""

    _from_workspace: bool = PrivateAttr(default=False)

    @property
    def from_workspace(self) -> bool:
        """Whether this entry comes from the workspace's (trusted) ``zuno.json``."""
        return self._from_workspace

    def mark_from_workspace(self) -> None:
        """Record that this entry comes from the workspace's trusted ``zuno.json``."""
        self._from_workspace = True

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                'give exactly one of "command" (a program spoken to over stdio) '
                'or "url" (a streamable HTTP endpoint)'
            )
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        return self

    def describe(self) -> str:
        """How the server is reached, for messages (``command args...`` or the URL)."""
        if self.url is not None:
            return self.url
        return " ".join([self.command or "", *self.args])


class McpSettings(_Section):
    """The MCP servers whose tools join the registry, by name."""

    servers: dict[str, McpServerSettings] = Field(default_factory=lambda: {})

    @field_validator("servers")
    @classmethod
    def _names(cls, servers: dict[str, McpServerSettings]) -> dict[str, McpServerSettings]:
        for name in servers:
            if not _SERVER_NAME.match(name):
                raise ValueError(
                    f"server name {name!r} must be 1-40 letters, digits, '_' or '-' "
                    "(it becomes part of tool names: mcp__<server>__<tool>)"
                )
        return servers
