"""The tools of a surface as a model sees them: one spec per tool, made once a process.

A fleet worker builds a runtime, and so a surface, for every session it runs.
Generating every tool's JSON Schema again each time, and having the providers
adapt it again (:class:`~zuno.agent.providers.schemas.ToolTable` keeps its
entries per spec object), was a good part of a session's fixed cost.
"""

from __future__ import annotations

from typing import Any

from zuno.agent.messages import ToolSpec
from zuno.contract.tool import Tool
from zuno.dispatch.registry import Surface

__all__ = ["tool_specs"]

_SPECS: dict[tuple[object, str, str], ToolSpec] = {}
"""A tool's spec by (argument model, name, description): made once a process."""


def tool_specs(surface: Surface) -> list[ToolSpec]:
    """The surface's tools as the model sees them.

    A tool whose schema is its argument model's (every built-in one) gets the
    same spec object in every session of the process: its JSON Schema is made
    once, and the providers' tables (:class:`~zuno.agent.providers.schemas.ToolTable`)
    adapt it once. A tool with a schema of its own (an MCP server's) is asked each time.
    """
    return [_spec(tool) for tool in surface.tools]


def _spec(tool: Tool[Any]) -> ToolSpec:
    if type(tool).schema is not Tool.schema:
        return ToolSpec(name=tool.name, description=tool.description, parameters=tool.schema())
    key = (tool.args_model, tool.name, tool.description)
    spec = _SPECS.get(key)
    if spec is None:
        if len(_SPECS) >= 1024:  # argument models made on the fly: do not keep them all
            _SPECS.clear()
        spec = _SPECS[key] = ToolSpec(
            name=tool.name, description=tool.description, parameters=tool.schema()
        )
    return spec
