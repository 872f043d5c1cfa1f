"""Tools an MCP server offers, as Zuno tools: names, arguments, declarations, results.

Each remote tool becomes a Zuno tool named ``mcp__<server>__<tool>`` whose
model-visible parameters are the server's own JSON Schema. Arguments are
validated against that schema in pre-flight (with ``jsonschema``), so a call
that does not fit is ``blocked: invalid_arguments`` naming the field and never
reaches the server.

Declarations fail closed (architecture invariant 2): a remote tool is
SideEffecting / Never / Exclusive unless the configuration declares it, or the
server is ``trusted`` and annotates it ``read_only_hint`` (then ReadOnly /
Safe / ParallelSafe). No hint makes a side-effecting tool retryable (only the
configuration can). An untrusted server's hints are shown, never believed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import mimetypes
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast

import mcp_types as types
from pydantic import ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from zuno.config.mcp import McpServerSettings
from zuno.contract.images import ImageAttachment, attachment_for, image_max_bytes
from zuno.contract.output import bound_text, format_size
from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolResult
from zuno.core.declarations import READ_ONLY_SAFE_PARALLEL, Concurrency, Declaration, Effect, Replay

__all__ = [
    "DeclarationChoice",
    "McpArguments",
    "McpResourceTool",
    "McpTool",
    "RemoteServer",
    "choose_declaration",
    "describe_content",
    "remote_tools",
    "tool_name",
]


class RemoteServer(Protocol):
    """A connected MCP server as its tools use it
    (:class:`zuno.integrations.mcp.client.McpConnection`).

    A protocol, so that the tools need not import the client that connects them.
    """

    name: str
    settings: McpServerSettings
    tools: list[types.Tool]
    """The server's tools, as it listed them at connection."""
    resources: list[types.Resource]
    """The server's resources, as it listed them at connection."""

    async def call_tool(
        self, remote_name: str, arguments: dict[str, Any], *, replay: Replay
    ) -> types.CallToolResult:
        """Call one of the server's tools."""
        ...

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """Read one of the server's resources."""
        ...


_NAME_LIMIT = 64
"""Model APIs accept tool names of at most 64 characters from ``[A-Za-z0-9_-]``."""


def tool_name(server: str, remote: str) -> str:
    """The Zuno name of a server's tool: ``mcp__<server>__<tool>``, made model-safe."""
    name = f"mcp__{server}__{re.sub(r'[^A-Za-z0-9_-]', '_', remote)}"
    if len(name) > _NAME_LIMIT:
        digest = hashlib.sha256(remote.encode()).hexdigest()[:8]
        name = f"{name[: _NAME_LIMIT - 9]}_{digest}"
    return name


# Declarations -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeclarationChoice:
    """The declaration of a remote tool and why it is that one.

    Attributes:
        declaration: What the dispatcher will use.
        source: ``configured``, ``trusted annotations`` or ``strict default``
            (``+``-joined when the configuration completes trusted annotations).
        notes: Hints that were shown but not believed, and similar remarks.
    """

    declaration: Declaration
    source: str
    notes: tuple[str, ...] = ()


def _hint_notes(annotations: types.ToolAnnotations | None) -> list[str]:
    """The loosening hints an untrusted server gave (each is ignored)."""
    if annotations is None:
        return []
    notes: list[str] = []
    if annotations.read_only_hint:
        notes.append("read_only_hint ignored (server not trusted)")
    if annotations.idempotent_hint:
        notes.append("idempotent_hint ignored (server not trusted)")
    if annotations.destructive_hint is False:
        notes.append("destructive_hint=false ignored (server not trusted)")
    return notes


def choose_declaration(remote: types.Tool, settings: McpServerSettings) -> DeclarationChoice:
    """The declaration of one remote tool: configuration, then trusted hints, else strict.

    A trusted server's ``read_only_hint`` makes a tool an inspection (ReadOnly /
    Safe / ParallelSafe). No hint ever loosens a side-effecting tool: an
    ``idempotent_hint`` is the server's word that a retry is harmless, and a
    wrong word would run the effect again, so only the configuration may
    declare such a tool ``safe`` or ``parallel_safe``.
    """
    annotations = remote.annotations
    hinted = Declaration()
    sources: list[str] = []
    notes: list[str] = []
    if settings.trusted and annotations is not None:
        if annotations.read_only_hint:
            hinted = READ_ONLY_SAFE_PARALLEL
            sources.append("trusted annotations")
        elif annotations.idempotent_hint:
            notes.append(
                "idempotent_hint not believed (only zuno.json can make a side effect safe)"
            )
    elif not settings.trusted:
        notes = _hint_notes(annotations)
    configured = settings.tools.get(remote.name)
    declaration = hinted
    if configured is not None:
        effect = configured.effect or hinted.effect
        if effect is Effect.READ_ONLY:
            replay = configured.replay or hinted.replay
            concurrency = configured.concurrency or hinted.concurrency
        else:
            # The configuration made it a side effect: the read-only hint's looser
            # replay and concurrency no longer apply; only configured ones do.
            replay = configured.replay or Replay.NEVER
            concurrency = configured.concurrency or Concurrency.EXCLUSIVE
        declaration = Declaration(effect, replay, concurrency, observes=configured.observes)
        sources.insert(0, "configured")
        if notes:
            notes = [n.replace("ignored", "overridden by the configuration") for n in notes]
    return DeclarationChoice(declaration, " + ".join(sources) or "strict default", tuple(notes))


# Arguments ----------------------------------------------------------------------


def _schema_errors(schema: dict[str, Any], data: Any) -> list[InitErrorDetails]:
    """The places where ``data`` does not fit ``schema``, as pydantic error details."""
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - jsonschema comes with the mcp SDK
        return []
    from jsonschema.validators import validator_for

    validator_class: Any = validator_for(schema)  # pyright: ignore[reportUnknownVariableType]
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError:
        # A server's broken schema cannot be enforced; a JSON object is still required.
        return []
    details: list[InitErrorDetails] = []
    errors = cast(Iterable[Any], validator_class(schema).iter_errors(data))
    for error in sorted(errors, key=lambda e: list(e.absolute_path)):
        path = tuple(cast(Iterable[str | int], error.absolute_path))
        validator = cast(str, error.validator)
        if validator == "required" and isinstance(error.instance, dict):
            present = cast(dict[str, Any], error.instance)
            required = cast(list[str], error.validator_value)
            for missing in (k for k in required if k not in present):
                details.append(InitErrorDetails(type="missing", loc=(*path, missing), input=data))
            continue
        if validator == "additionalProperties" and isinstance(error.instance, dict):
            given = cast(dict[str, Any], error.instance)
            known = cast(dict[str, Any], error.schema.get("properties", {}))
            patterns = cast(dict[str, Any], error.schema.get("patternProperties", {}))
            for extra in given:
                if extra not in known and not any(re.search(p, extra) for p in patterns):
                    details.append(
                        InitErrorDetails(
                            type="extra_forbidden", loc=(*path, extra), input=given[extra]
                        )
                    )
            continue
        message = cast(str, error.message)
        details.append(
            InitErrorDetails(
                type=PydanticCustomError("json_schema", "{message}", {"message": message}),
                loc=path or ("(arguments)",),
                input=error.instance,
            )
        )
    return details


class McpArguments(ToolArgs):
    """Arguments of a remote tool: any JSON object that fits the server's schema.

    Subclasses set ``json_schema``; validation happens in pre-flight, so a call
    that does not fit is blocked before it reaches the server.
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    json_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    @model_validator(mode="before")
    @classmethod
    def _fits_schema(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data  # pydantic itself says a JSON object is expected
        problems = _schema_errors(cls.json_schema, data)
        if problems:
            raise ValidationError.from_exception_data(cls.__name__, problems)
        return cast(dict[str, Any], data)

    def payload(self) -> dict[str, Any]:
        """The arguments to send, exactly as given (``null`` values included)."""
        return dict(self.model_extra or {})


def _arguments_model(schema: dict[str, Any]) -> type[McpArguments]:
    class Arguments(McpArguments):
        json_schema = schema

    return Arguments


# Results ------------------------------------------------------------------------


def _decoded_size(data: str) -> str:
    try:
        return format_size(len(base64.b64decode(data, validate=False)))
    except (binascii.Error, ValueError):
        return f"{len(data)} base64 characters"


def describe_content(blocks: Iterable[types.ContentBlock]) -> str:
    """Text blocks joined; other blocks described in one line each."""
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent):
            parts.append(f"[image: {block.mime_type}, {_decoded_size(block.data)}]")
        elif isinstance(block, types.AudioContent):
            parts.append(f"[audio: {block.mime_type}, {_decoded_size(block.data)}]")
        elif isinstance(block, types.ResourceLink):
            what = f"{block.name} " if block.name else ""
            parts.append(f"[resource link: {what}<{block.uri}>]")
        else:
            parts.append(_describe_resource(block.resource))
    return "\n".join(parts)


def _describe_resource(
    resource: types.TextResourceContents | types.BlobResourceContents,
) -> str:
    if isinstance(resource, types.TextResourceContents):
        return f"[resource <{resource.uri}>]\n{resource.text}"
    mime = resource.mime_type or "binary"
    return f"[resource <{resource.uri}>: {mime}, {_decoded_size(resource.blob)}]"


def _bounded(text: str, ctx: ToolContext) -> tuple[str, Any]:
    bounded = bound_text(text, ctx.limits, lambda: ctx.artifact_path("mcp-result"))
    return bounded.text, bounded.artifact


# Tools --------------------------------------------------------------------------


class McpTool(Tool[McpArguments]):
    """A tool of an MCP server. One subclass per remote tool carries its declaration."""

    server: ClassVar[str]
    remote_name: ClassVar[str]
    input_schema: ClassVar[dict[str, Any]]
    choice: ClassVar[DeclarationChoice]
    remote: ClassVar[types.Tool]

    def __init__(self, connection: RemoteServer) -> None:
        self._connection = connection

    def schema(self) -> dict[str, Any]:
        """The server's own JSON Schema, passed through to models."""
        return dict(self.input_schema)

    async def run(self, args: McpArguments, ctx: ToolContext) -> ToolResult:
        result = await self._connection.call_tool(
            self.remote_name, args.payload(), replay=self.declaration.replay
        )
        images: list[ImageAttachment] = []
        text = _result_text(result.content, ctx, images)
        structured = result.structured_content
        data: dict[str, Any] = {"server": self.server, "tool": self.remote_name}
        if structured is not None:
            # One copy for the model when both say the same; both, labelled, when not.
            shown = json.dumps(structured, ensure_ascii=False, default=str)
            if not text:
                text = shown
            elif not _says_the_same(text, structured):
                text = _text_and_structured(text, structured)
                data["structured_content"] = structured
        failed = result.is_error
        if failed:
            text = (
                f"The MCP server {self.server!r} reported that {self.remote_name} failed: "
                f"{text or '(no message)'}"
            )
        else:
            broken = _breaks_output_schema(self.remote.output_schema, structured, result)
            if broken:
                # The server answered, so this is an error, not an uncertain outcome;
                # what it sent is kept for the model to judge.
                failed = True
                text = (
                    f"The MCP server {self.server!r} answered {self.remote_name} with a "
                    f"result that breaks the tool's own outputSchema ({broken}). "
                    f"What it sent:\n{text or '(nothing)'}"
                )
        output, artifact = _bounded(text, ctx)
        return ToolResult(
            output, data=data, is_error=failed, artifact=artifact, images=tuple(images)
        )


def _says_the_same(text: str, structured: dict[str, Any]) -> bool:
    """Whether the text blocks already say what the structured content does.

    Servers often send both: the structured content serialized as text (in any
    layout), or a plain value as text and the same value under one key as
    structured content (``{"result": value}``, or a file server's
    ``{"content": text}``).
    """
    parsed = _parsed(text)
    if parsed == structured:
        return True
    return len(structured) == 1 and _repeats(text, parsed, next(iter(structured.values())))


def _text_and_structured(text: str, structured: dict[str, Any]) -> str:
    """The text and the structured content, each labelled, the text given once.

    A server that puts its text under one key beside other fields (``zuno mcp
    serve``: ``{"output": text, "total_lines": ...}``) would otherwise have
    the model read the text twice; that key is named instead of repeated.
    """
    parsed = _parsed(text)
    key = next((k for k, v in structured.items() if _repeats(text, parsed, v)), None)
    if key is None:
        shown = json.dumps(structured, ensure_ascii=False, default=str)
        return f"[text content]\n{text}\n[structured content]\n{shown}"
    rest = {k: v for k, v in structured.items() if k != key}
    shown = json.dumps(rest, ensure_ascii=False, default=str)
    return f"{text}\n[structured content, besides {key!r} (the text above)]\n{shown}"


def _parsed(text: str) -> Any:
    """The text as JSON when it is JSON, else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _repeats(text: str, parsed: Any, value: Any) -> bool:
    """Whether one value of the structured content is what the text says."""
    if value in (parsed, text):
        return True
    # The text blocks joined by newlines: the value may lack or add a final one.
    return isinstance(value, str) and value.rstrip("\n") == text.rstrip("\n")


def _breaks_output_schema(
    schema: dict[str, Any] | None,
    structured: dict[str, Any] | None,
    result: types.CallToolResult,
) -> str | None:
    """Why a result does not fit the tool's ``outputSchema``, or None when it does."""
    if schema is None:
        return None
    if structured is None and "structured_content" not in result.model_fields_set:
        return "it has no structuredContent"
    import jsonschema
    from jsonschema.exceptions import best_match  # pyright: ignore[reportUnknownVariableType]
    from jsonschema.validators import validator_for

    validator_class: Any = validator_for(schema)  # pyright: ignore[reportUnknownVariableType]
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError:
        return None  # a broken schema cannot be enforced
    errors: Iterable[Any] = validator_class(schema).iter_errors(structured)
    error: Any = best_match(errors)  # pyright: ignore[reportUnknownVariableType]
    if error is None:
        return None
    where = "/".join(str(p) for p in cast(Iterable[str | int], error.absolute_path))
    message = cast(str, error.message)
    return f"{where + ': ' if where else ''}{_cut(message, 200)}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _result_text(
    blocks: Iterable[types.ContentBlock],
    ctx: ToolContext,
    images: list[ImageAttachment] | None = None,
) -> str:
    """Like :func:`describe_content`, saving images and audio as artifacts it names.

    Saved images the model can be sent (see :mod:`zuno.contract.images`) are added to ``images``.
    """
    parts: list[str] = []
    media = 0
    for block in blocks:
        if isinstance(block, types.ImageContent | types.AudioContent):
            media += 1
            parts.append(_save_media(block, media, ctx, images))
        else:
            parts.append(describe_content([block]))
    return "\n".join(parts)


_EXTENSIONS = {
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/ogg": ".ogg",
    "image/webp": ".webp",
}
"""Media types the standard table lacks on some Pythons."""


def _save_media(
    block: types.ImageContent | types.AudioContent,
    n: int,
    ctx: ToolContext,
    images: list[ImageAttachment] | None = None,
) -> str:
    """Save one image or audio clip beside the call's other artifacts; the line naming it."""
    kind = block.type
    try:
        data = base64.b64decode(block.data, validate=True)
    except (binascii.Error, ValueError):
        return f"[{kind}: {block.mime_type}, not valid base64, not saved]"
    cap = ctx.config.tool_output.artifact_max_bytes
    if cap is not None and len(data) > cap:
        return (
            f"[{kind}: {block.mime_type}, {format_size(len(data))}, not saved: over "
            f"tool_output.artifact_max_bytes ({format_size(cap)})]"
        )
    mime = block.mime_type.split(";")[0].strip().lower()
    extension = _EXTENSIONS.get(mime) or mimetypes.guess_extension(mime) or ".bin"
    # The store's naming (session folder, call id), with the media's own extension.
    path = ctx.artifact_path(f"{kind}-{n}")
    path = path.with_name(path.name.removesuffix(".txt") + extension)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as exc:
        return f"[{kind}: {block.mime_type}, {format_size(len(data))}, not saved: {exc}]"
    if kind == "image" and images is not None:
        # Sent to the model as an image too, when its bytes make one it can take.
        attached = attachment_for(
            data, path, f"image {n} of the result", image_max_bytes(ctx.config)
        )
        if attached is not None:
            images.append(attached)
    return f"[{kind}: {block.mime_type}, {format_size(len(data))}, saved to {path}]"


def _remote_tool(connection: RemoteServer, remote: types.Tool, name: str) -> McpTool:
    """A Zuno tool for one remote tool (a subclass, so its declaration is a class fact)."""
    chosen = choose_declaration(remote, connection.settings)
    summary = remote.description or remote.title or f"{remote.name} (no description)"
    schema = dict(remote.input_schema) if remote.input_schema else {"type": "object"}
    # A class body cannot see a function local of the same name as its attribute.
    name_, server_ = name, connection.name

    class Remote(McpTool):
        name = name_
        description = f"[MCP server {server_!r}] {summary}"
        args_model = _arguments_model(schema)
        declaration = chosen.declaration
        server = server_
        remote_name = remote.name
        input_schema = schema
        choice = chosen

    Remote.remote = remote
    return Remote(connection)


class ReadResourceArgs(ToolArgs):
    """Arguments of a resource read."""

    uri: str


class McpResourceTool(Tool[ReadResourceArgs]):
    """Read one resource of an MCP server: an inspection (ReadOnly / Safe / ParallelSafe)."""

    args_model = ReadResourceArgs
    declaration = READ_ONLY_SAFE_PARALLEL
    server: ClassVar[str]

    def __init__(self, connection: RemoteServer) -> None:
        self._connection = connection

    async def run(self, args: ReadResourceArgs, ctx: ToolContext) -> ToolResult:
        result = await self._connection.read_resource(args.uri)
        text = "\n".join(_describe_resource(item) for item in result.contents)
        output, artifact = _bounded(text or f"(the resource {args.uri} is empty)", ctx)
        return ToolResult(output, data={"server": self.server, "uri": args.uri}, artifact=artifact)


def _resource_tool(connection: RemoteServer, name: str) -> McpResourceTool:
    listed = "\n".join(
        f"- {r.uri}"
        + (f" ({r.name})" if r.name else "")
        + (f": {r.description}" if r.description else "")
        for r in connection.resources[:30]
    )
    more = len(connection.resources) - 30
    if more > 0:
        listed += f"\n- ... and {more} more"
    text = (
        f"[MCP server {connection.name!r}] Read one of the server's resources by URI. "
        f"Resources:\n{listed}"
    )
    name_, server_ = name, connection.name

    class Resource(McpResourceTool):
        name = name_
        description = text
        server = server_

    return Resource(connection)


def remote_tools(connection: RemoteServer) -> list[Tool[Any]]:
    """The Zuno tools of one connected server (its tools, then a resource reader if any)."""
    tools: list[Tool[Any]] = []
    taken: set[str] = set()

    def unique(name: str) -> str:
        candidate, n = name, 2
        while candidate in taken:
            candidate = f"{name}_{n}"
            n += 1
        taken.add(candidate)
        return candidate

    for remote in connection.tools:
        tools.append(
            _remote_tool(connection, remote, unique(tool_name(connection.name, remote.name)))
        )
    if connection.resources:
        tools.append(
            _resource_tool(connection, unique(tool_name(connection.name, "read_resource")))
        )
    return tools
