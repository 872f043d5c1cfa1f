"""The ``agents`` and ``council`` sections of ``zuno.json``: named agents and the council they ask.

Every tool name an agent lists is checked when the file is loaded
(:func:`zuno.config.loading.validate_config`); the schema names them too
(:data:`TOOL_NAMES_SCHEMA`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from zuno.config.permission import PermissionSettings
from zuno.core.tool_names import ALL_NAMES, MCP_NAME_PATTERN

__all__ = ["TOOL_NAMES_SCHEMA", "AgentSettings", "CouncilSettings", "ToolName"]

TOOL_NAMES_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"enum": sorted(ALL_NAMES)},
        {"pattern": MCP_NAME_PATTERN, "description": "mcp__<server>__<tool>, or mcp__<server>__*"},
    ]
}
"""What the schema says a tool name is (the server part is checked on loading)."""

ToolName = Annotated[str, Field(json_schema_extra=TOOL_NAMES_SCHEMA)]
"""A tool name in an agent's list: a built-in name, or an MCP server's tools."""


class _Section(BaseModel):
    # strict: "yes" is not a boolean and "8" not a number; a file says what it means.
    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)


class CouncilSettings(_Section):
    """A council: several members answer one question; ``council_run`` asks them."""

    members: list[str] = Field(min_length=2)
    """Agent names, or models as ``PROVIDER:MODEL``."""
    synthesizer: str | None = None
    """The agent or model that writes the synthesis (default: the asking agent's model)."""
    agents: list[str] = Field(default_factory=lambda: ["build"])
    """The agents that can reach the council."""


class AgentSettings(_Section):
    """A named agent: its model, prompt, exact tool allowlist and permission overrides."""

    description: str = ""
    model: str | None = None
    prompt: str | None = None
    tools: list[ToolName] | None = None
    """When set, exactly these tools: it replaces the default surface."""
    permission: PermissionSettings | None = None
    max_steps: int | None = Field(default=None, ge=1, le=1000)
