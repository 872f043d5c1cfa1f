"""Tool schemas in the shape each API accepts.

A tool's argument schema comes from its pydantic model: ``$defs`` with
``$ref`` pointers, a ``title`` on every node. Both APIs get a copy with the
references inlined and the titles dropped (they cost tokens and say nothing
the property name does not).

OpenAI's strict mode makes the model's arguments always match the schema, but
accepts only a subset of JSON Schema: every object closed
(``additionalProperties: false``), every property listed in ``required``, an
optional property written as a union with ``null``. The conversion here only
goes strict when that keeps the meaning of the arguments the dispatcher will
validate:

- an optional property whose default is ``None`` (``x: int | None = None``)
  becomes required and nullable: the model's ``null`` means what omitting it
  meant;
- an optional property with another default (``limit: int = 100``) would turn
  into a ``null`` the argument model rejects, so the tool stays non-strict;
- open maps (``dict[str, str]``), tuples, ``allOf`` intersections, ``not``,
  conditionals and recursive models stay non-strict too.

Constraint keywords strict mode does not know (``minLength``, ``maxLength``,
unusual ``format`` values, ...) are left out of the strict copy: that only
loosens what the model is told, and the dispatcher still validates.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, cast

from zuno.agent.messages import ToolSpec

__all__ = ["ToolTable", "anthropic_tool", "inline_schema", "openai_tool", "strict_schema"]

# Keywords that hold one subschema, a list of them, or a map of them.
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")

# What strict mode accepts; anything structural outside it means non-strict.
_STRICT_KEEP = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "enum",
        "const",
        "description",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
_STRICT_BLOCKERS = frozenset(
    {
        "not",
        "if",
        "then",
        "else",
        "prefixItems",
        "patternProperties",
        "propertyNames",
        "dependentSchemas",
        "dependentRequired",
        "unevaluatedProperties",
        "contains",
        "$ref",
    }
)
_STRICT_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)

Schema = dict[str, Any]


class _Recursive(Exception):
    """A ``$ref`` cycle: the schema cannot be inlined."""


class _NotStrict(Exception):
    """A construct strict mode cannot express without changing its meaning."""


def _as_schema(value: Any) -> Schema | None:
    return cast(Schema, value) if isinstance(value, dict) else None


def _resolve(ref: str, root: Schema) -> Schema:
    if not ref.startswith("#/"):
        raise _Recursive(ref)  # A remote reference: leave the schema as it is.
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    resolved = _as_schema(node)
    if resolved is None:
        raise _Recursive(ref)
    return resolved


def _inline(node: Schema, root: Schema, seen: tuple[str, ...]) -> Schema:
    ref = node.get("$ref")
    if isinstance(ref, str):
        if ref in seen:
            raise _Recursive(ref)
        # Siblings of a $ref (a field's description) win over the target's own.
        target = _inline(_resolve(ref, root), root, (*seen, ref))
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _inline(merged, root, seen) if "$ref" in merged else merged
    out: Schema = {}
    for key, value in node.items():
        if key in ("$defs", "definitions"):
            continue
        if key == "title" and isinstance(value, str):
            continue  # a keyword here, never a property: properties are under "properties"
        if key in _ONE and (sub := _as_schema(value)) is not None:
            out[key] = _inline(sub, root, seen)
        elif key in _MANY and isinstance(value, list):
            out[key] = [_inline_any(s, root, seen) for s in cast(list[Any], value)]
        elif key in _MAP and isinstance(value, dict):
            subs = cast(dict[str, Any], value)
            out[key] = {name: _inline_any(s, root, seen) for name, s in subs.items()}
        else:
            out[key] = copy.deepcopy(value)
    return out


def _inline_any(value: Any, root: Schema, seen: tuple[str, ...]) -> Any:
    sub = _as_schema(value)
    return copy.deepcopy(value) if sub is None else _inline(sub, root, seen)


def inline_schema(schema: Schema) -> Schema:
    """A copy of ``schema`` with local ``$ref`` pointers replaced by their targets.

    Titles are dropped. A recursive schema cannot be inlined; it is returned
    unchanged apart from a deep copy (both APIs resolve ``#/$defs/...``).
    """
    try:
        return _inline(schema, schema, ())
    except (_Recursive, KeyError):
        return copy.deepcopy(schema)


def _admits_null(node: Schema) -> bool:
    kind = node.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    variants = node.get("anyOf")
    if isinstance(variants, list):
        return any(_admits_null(v) for v in cast(list[Schema], variants))
    return False


def _strict(node: Schema) -> Schema:
    blocked = _STRICT_BLOCKERS.intersection(node)
    if blocked:
        raise _NotStrict(", ".join(sorted(blocked)))
    node = dict(node)
    if "oneOf" in node:
        # Exclusive unions from pydantic are discriminated, so "any of" means the same.
        node["anyOf"] = node.pop("oneOf")
    all_of = node.pop("allOf", None)
    if isinstance(all_of, list):
        parts = cast(list[Schema], all_of)
        if len(parts) != 1:
            raise _NotStrict("allOf")
        node = {**parts[0], **node}
    out: Schema = {k: v for k, v in node.items() if k in _STRICT_KEEP}
    if out.get("format") not in _STRICT_FORMATS:
        out.pop("format", None)
    if "anyOf" in out:
        out["anyOf"] = [_strict(v) for v in cast(list[Schema], out["anyOf"])]
    if (items := _as_schema(out.get("items"))) is not None:
        out["items"] = _strict(items)
    elif "items" in out:
        raise _NotStrict("items")
    if out.get("type") == "object" or "properties" in out:
        out.update(_strict_object(node))
    return out


def _strict_object(node: Schema) -> Schema:
    extra = node.get("additionalProperties", False)
    if extra is not False:
        raise _NotStrict("open object")
    properties = _as_schema(node.get("properties")) or {}
    required = set(cast(list[str], node.get("required", [])))
    strict_props: Schema = {}
    for name, raw in properties.items():
        prop = cast(Schema, raw)
        converted = _strict(prop)
        if name not in required:
            if prop.get("default") is not None:
                raise _NotStrict(f"{name} has a non-null default")
            if not _admits_null(converted):
                description = converted.pop("description", None)
                converted = {"anyOf": [converted, {"type": "null"}]}
                if description is not None:
                    converted["description"] = description
        strict_props[name] = converted
    return {
        "type": "object",
        "properties": strict_props,
        "required": list(strict_props),
        "additionalProperties": False,
    }


def strict_schema(schema: Schema) -> Schema | None:
    """The strict-mode form of an argument schema, or None when it has none.

    Args:
        schema: A JSON Schema as produced by a pydantic model.

    Returns:
        A closed schema with every property required, or None when strict mode
        cannot express the schema without changing what the arguments mean.
    """
    inlined = inline_schema(schema)
    if "$defs" in inlined or "definitions" in inlined:
        return None  # recursive: could not be inlined
    try:
        out = _strict(inlined)
    except _NotStrict:
        return None
    return out if out.get("type") == "object" else None


def openai_tool(spec: ToolSpec, strict: bool = True) -> dict[str, Any]:
    """A Chat Completions ``tools`` entry for ``spec``.

    Args:
        spec: The tool.
        strict: Ask for strict mode; it is used only when the schema allows it
            (see the module docstring), and the entry then says ``"strict": true``.

    Returns:
        ``{"type": "function", "function": {...}}``.
    """
    function: dict[str, Any] = {"name": spec.name, "description": spec.description}
    strict_form = strict_schema(spec.parameters) if strict else None
    if strict_form is not None:
        function["parameters"] = strict_form
        function["strict"] = True
    else:
        function["parameters"] = _object_root(inline_schema(spec.parameters))
    return {"type": "function", "function": function}


def anthropic_tool(spec: ToolSpec) -> dict[str, Any]:
    """A Messages API ``tools`` entry for ``spec``.

    Returns:
        ``{"name": ..., "description": ..., "input_schema": {...}}``.
    """
    return {
        "name": spec.name,
        "description": spec.description,
        "input_schema": _object_root(inline_schema(spec.parameters)),
    }


def _object_root(schema: Schema) -> Schema:
    # Both APIs insist that a tool's arguments are one JSON object.
    if "type" not in schema:
        schema = {"type": "object", **schema}
    if schema["type"] == "object" and "properties" not in schema:
        schema["properties"] = {}
    return schema


class ToolTable:
    """``tools`` entries of one API's shape, each built once per tool spec and reused.

    The agent loop sends the same tools with every model request, and a fleet
    worker's sessions share their tool specs (:func:`zuno.agent.loop.tool_specs`
    keeps one per tool); adapting a schema (inlining ``$ref``, the strict form)
    for every request was a good part of a worker's time. Entries are kept per
    spec object, so one table serves every provider of its kind in the process;
    at most ``keep`` specs are remembered (the table starts afresh past that).
    """

    def __init__(self, build: Callable[[ToolSpec], dict[str, Any]], keep: int = 512) -> None:
        self._build = build
        self._keep = keep
        # Keyed by identity; the spec is kept beside its entry so that its id stays its own.
        self._entries: dict[int, tuple[ToolSpec, dict[str, Any]]] = {}

    def entries(self, tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
        """The entries for ``tools``, in order (a new list; the entries themselves are shared)."""
        out: list[dict[str, Any]] = []
        for spec in tools:
            known = self._entries.get(id(spec))
            if known is None:
                if len(self._entries) >= self._keep:
                    self._entries.clear()
                known = self._entries[id(spec)] = (spec, self._build(spec))
            out.append(known[1])
        return out
