"""Turning a model's raw arguments into a tool's validated ones, with errors a model can fix.

Arguments arrive as the model's raw JSON text, an object, or nothing. Bad JSON,
a non-object and a validation failure each become a precise message: which
field, what was expected, what was sent, and the shape of the arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from zuno.tool import Tool

__all__ = ["ArgumentsError", "parse_arguments", "raw_arguments", "validation_message"]


class ArgumentsError(ValueError):
    """Arguments that are not a JSON object; the message says what to send."""


def raw_arguments(arguments: str | Mapping[str, Any] | None) -> str:
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    try:
        return json.dumps(dict(arguments), sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(arguments)


def parse_arguments(arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    text = arguments.strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArgumentsError(
            f"the arguments are not valid JSON ({exc.msg} at line {exc.lineno}, "
            f"column {exc.colno}); send a JSON object",
        ) from exc
    if not isinstance(value, dict):
        raise ArgumentsError(
            f"the arguments must be a JSON object, got {type(value).__name__}",
        )
    return value  # type: ignore[return-value]


def expected_shape(tool: Tool[Any]) -> str:
    schema = tool.schema()
    required = set(schema.get("required", []))
    parts: list[str] = []
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type") or "/".join(
            str(p.get("type", "?")) for p in prop.get("anyOf", []) if p.get("type") != "null"
        )
        parts.append(f"{name}: {kind}{'' if name in required else '?'}")
    return "{" + ", ".join(parts) + "}"


def validation_message(tool: Tool[Any], exc: ValidationError) -> str:
    problems: list[str] = []
    for error in exc.errors():
        field_name = ".".join(str(p) for p in error["loc"]) or "(arguments)"
        if error["type"] == "extra_forbidden":
            problems.append(f"`{field_name}` is not an argument of {tool.name}")
            continue
        if error["type"] == "missing":
            problems.append(f"`{field_name}` is required")
            continue
        got = json.dumps(error.get("input"), default=str)
        if len(got) > 60:
            got = got[:57] + "..."
        problems.append(f"`{field_name}`: {error['msg']} (got {got})")
    return "; ".join(problems) + f". Expected arguments: {expected_shape(tool)}"
