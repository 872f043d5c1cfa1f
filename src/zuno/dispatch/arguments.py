"""Turning a model's raw arguments into a tool's validated ones, with errors a model can fix.

Arguments arrive as the model's raw JSON text, an object, or nothing. Bad JSON,
a non-object and a validation failure each become a precise message: which
field, what was expected, what was sent, and the shape of the arguments.

Text that is not Unicode (a lone surrogate such as ``"\\ud800"``, from a JSON
escape or from undecodable bytes) is refused wherever it hides: in a name, a
value or the raw text. So is nesting deeper than :data:`MAX_DEPTH`. Both are
``invalid_arguments``, never an exception.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from zuno.contract.tool import Tool
from zuno.durability.store.storable import storable

if TYPE_CHECKING:
    from zuno.contract.calls import CallRequest

__all__ = [
    "MAX_DEPTH",
    "ArgumentsError",
    "example_arguments",
    "parse_arguments",
    "planned_calls",
    "raw_arguments",
    "validation_message",
]

MAX_DEPTH = 64
"""How deep arguments may nest (objects and lists); no tool needs more than a few levels."""


class ArgumentsError(ValueError):
    """Arguments that are not a JSON object; the message says what to send."""


def raw_arguments(arguments: str | Mapping[str, Any] | None) -> str:
    """The arguments as sent, as text to store (what cannot be encoded is escaped)."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return storable(arguments)
    try:
        return json.dumps(dict(arguments), sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        try:
            return storable(repr(arguments))
        except RecursionError:
            return f"<{type(arguments).__name__} nested too deeply to show>"


def planned_calls(requests: Sequence[CallRequest], limit: int = 200) -> list[dict[str, str]]:
    """What a step asked for, short: each call's tool and arguments (cut to ``limit`` characters).

    Kept with the step's opening, so a call that never got a row (the process
    was killed before it started) can still be shown as not run.
    """
    planned: list[dict[str, str]] = []
    for request in requests:
        arguments = request.arguments
        if isinstance(arguments, Mapping):
            # Long values are cut first: a whole file's content is not dumped to be dropped.
            arguments = {
                str(k): (v[:limit] if isinstance(v, str) else v)
                for k, v in arguments.items()  # pyright: ignore[reportUnknownVariableType]
            }
        text = raw_arguments(arguments)
        planned.append(
            {
                "tool": storable(str(request.tool)),
                "arguments": text if len(text) <= limit else text[: limit - 3] + "...",
            }
        )
    return planned


def parse_arguments(arguments: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """The arguments as an object, not yet validated against a tool.

    Raises:
        ArgumentsError: Not a JSON object, not Unicode text, or nested too deeply.
    """
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        value: Any = dict(arguments)
    else:
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
        except RecursionError as exc:
            raise ArgumentsError(_too_deep("(arguments)")) from exc
        if not isinstance(value, dict):
            raise ArgumentsError(
                f"the arguments must be a JSON object, got {type(value).__name__}",
            )
    _check_text(value)
    return value  # type: ignore[no-any-return]


def _too_deep(where: str) -> str:
    return f"`{where}` nests deeper than {MAX_DEPTH} levels; send flatter arguments"


def _unicode_problem(text: str) -> str | None:
    """The first character of ``text`` that UTF-8 cannot encode, escaped; None if none."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return text[exc.start].encode("utf-8", "backslashreplace").decode("ascii")
    return None


def _check_text(value: Any) -> None:
    """Refuse names and strings that are not Unicode text, and too deep a nesting.

    Iterative (no recursion limit to hit), one visit per value.
    """
    stack: list[tuple[str, Any, int]] = [("", value, 0)]
    while stack:
        where, item, depth = stack.pop()
        if isinstance(item, str):
            bad = _unicode_problem(item)
            if bad is not None:
                raise ArgumentsError(
                    f"`{where or '(arguments)'}` holds {bad}, a lone surrogate, which is not "
                    "valid Unicode text; send the text as UTF-8"
                )
            continue
        if isinstance(item, Mapping | list | tuple) and depth >= MAX_DEPTH:
            raise ArgumentsError(_too_deep(where or "(arguments)"))
        if isinstance(item, Mapping):
            for key, inner in cast(Mapping[object, object], item).items():
                if not isinstance(key, str):
                    raise ArgumentsError(
                        f"argument names must be text, got {type(key).__name__} "
                        f"in `{where or '(arguments)'}`"
                    )
                name = f"{where}.{key}" if where else key
                bad = _unicode_problem(key)
                if bad is not None:
                    raise ArgumentsError(
                        f"the argument name `{storable(name)}` holds {bad}, a lone surrogate, "
                        "which is not valid Unicode text; send names as UTF-8"
                    )
                stack.append((name, inner, depth + 1))
        elif isinstance(item, list | tuple):
            for position, inner in enumerate(cast(Sequence[object], item)):
                stack.append((f"{where}[{position}]", inner, depth + 1))


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


def example_arguments(tool: Tool[Any], given: str) -> str | None:
    """The right form of arguments given as plain text instead of JSON, for a person to copy.

    ``zuno call read README.md`` meant ``{"path": "README.md"}``: a tool with
    one required text argument takes the text as its value; otherwise each
    required argument is shown with a placeholder. None when ``given`` is JSON.
    """
    try:
        json.loads(given)
    except ValueError:
        pass
    else:
        return None
    schema = tool.schema()
    properties: dict[str, Any] = schema.get("properties") or {}
    required: list[str] = list(schema.get("required") or [])
    if not required:
        required = list(properties)[:1]
    texts = [name for name in required if (properties.get(name) or {}).get("type") == "string"]
    if len(required) == 1 and texts and given.strip():
        return json.dumps({required[0]: given.strip()}, ensure_ascii=False)
    return json.dumps({name: _placeholder(properties.get(name) or {}) for name in required})


def _placeholder(field: dict[str, Any]) -> Any:
    kind = field.get("type")
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return "..."
