"""How a value ``zuno.json`` cannot hold is said: the key, the value, and what would do.

A pydantic validation error names a location and a type; a person wants the
key as written in the file, the value found, and the fix: the allowed choices
or range, or for an unknown key the closest known one (``did you mean``).
"""

from __future__ import annotations

import difflib
import json
import re
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

__all__ = ["describe_problem"]


def describe_problem(error: Any, root: type[BaseModel]) -> str:
    """One validation error of a file read into ``root``, as a sentence a person can act on.

    Args:
        error: One entry of :meth:`pydantic.ValidationError.errors`.
        root: The settings model the whole file was read into.
    """
    loc = ".".join(str(p) for p in error["loc"]) or "(top level)"
    value = json.dumps(error.get("input"), default=str)
    if len(value) > 80:
        value = value[:77] + "..."
    kind = error["type"]
    if kind == "extra_forbidden":
        return f"unknown key {loc!r}; {_did_you_mean(error['loc'], root)}"
    if kind == "missing":
        return f"key {loc!r} is required"
    ctx: dict[str, Any] = error.get("ctx") or {}
    expected: object = ctx.get("expected")
    if kind in ("literal_error", "enum") and isinstance(expected, str):
        # JSON strings, as they are written in the file.
        choices = re.sub(r"'([^']*)'", r'"\1"', expected)
        return f"key {loc!r} has value {value}: it must be {choices}"
    allowed = _allowed_range(error["loc"], root)
    return f"key {loc!r} has value {value}: {error['msg']}{allowed}"


def _did_you_mean(loc: tuple[Any, ...], root: type[BaseModel]) -> str:
    """The fix for an unknown key: the closest known key of its section, when one is close."""
    section = _section_at(loc[:-1], root)
    name = loc[-1] if loc else None
    if section is None or not isinstance(name, str):
        return "remove it or check its spelling"
    known = [n for n, f in section.model_fields.items() if not f.exclude]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f"did you mean {'.'.join([*map(str, loc[:-1]), close[0]])!r}?"
    return f"remove it, or use one of: {', '.join(sorted(known))}"


def _section_at(loc: tuple[Any, ...], root: type[BaseModel]) -> type[BaseModel] | None:
    """The settings model that holds the keys found at ``loc`` (None: not a model)."""
    annotation: Any = root
    for part in loc:
        annotation = _unwrapped(annotation)
        fields = getattr(annotation, "model_fields", None)
        if fields is not None:
            if not isinstance(part, str) or part not in fields:
                return None
            annotation = fields[part].annotation
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]  # ``part`` is a key of the map
        else:
            return None
    annotation = _unwrapped(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _unwrapped(annotation: Any) -> Any:
    """``X`` of ``X | None``; anything else as it is."""
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            return inner[0]
    return annotation


def _allowed_range(loc: tuple[Any, ...], root: type[BaseModel]) -> str:
    """The declared bounds of the field at ``loc``, as `` (allowed: 1..=64)``."""
    model: Any = root
    field = None
    for part in loc:
        fields = getattr(model, "model_fields", None)
        if not isinstance(part, str) or fields is None or part not in fields:
            return ""
        field = fields[part]
        model = field.annotation
    if field is None:
        return ""
    low = high = None
    for meta in field.metadata:
        low = getattr(meta, "ge", low)
        high = getattr(meta, "le", high)
    if low is None and high is None:
        return ""
    return f" (allowed: {low if low is not None else ''}..={high if high is not None else ''})"
