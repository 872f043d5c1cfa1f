"""The ``lsp`` tool: questions to the workspace's language server.

A registered slot: not in the default surface, active when an agent names it
or ``"tools": {"lsp": true}``. Every action is an inspection (ReadOnly / Safe /
ParallelSafe): the server only reads. Servers come from ``lsp.servers`` (by
file extension; pyright for Python by default), are started on first use and
kept for the process (see :mod:`zuno.integrations.lsp.pool`). Requests in flight are
bounded by ``concurrency.lsp_requests`` per runtime.

Failures::

    path outside the workspace, line or column past the end  -> ArgumentsRejected (blocked)
    no server for the extension, server not installed,
    server failed to start, server refused the request        -> ToolError
    no answer in lsp.request_timeout, server died             -> TransientError (may be retried)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self

import anyio.to_thread
from pydantic import Field, model_validator

from zuno.config.lsp import LspServerSettings, LspSettings
from zuno.contract.output import bound_text
from zuno.contract.tool import (
    ArgumentsRejected,
    Tool,
    ToolArgs,
    ToolContext,
    ToolError,
    ToolResult,
    TransientError,
)
from zuno.core.declarations import INSPECTION
from zuno.execution.server_launch import find_program
from zuno.integrations.lsp.documents import OpenDocument, path_to_uri, to_utf16
from zuno.integrations.lsp.errors import (
    RequestTimeout,
    ResponseError,
    ServerExited,
    ServerUnavailable,
)
from zuno.integrations.lsp.render import (
    MAX_ITEMS,
    SourceLines,
    parse_locations,
    render_diagnostics,
    render_document_symbols,
    render_hover,
    render_locations,
    render_workspace_symbols,
)

# The client (and lsprotocol, ~0.2 s) is imported when a question is asked: a
# surface with the lsp tool but no call to it never pays for it.
if TYPE_CHECKING:
    from lsprotocol import types

    from zuno.integrations.lsp.client import LspClient

__all__ = ["LspAction", "LspArgs", "LspTool"]

LspAction = Literal[
    "definition", "references", "hover", "diagnostics", "symbols", "workspace_symbols"
]

_POSITIONAL = ("definition", "references", "hover")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# Answers that mean "ask again": the request was cancelled or the file changed meanwhile.
_RETRYABLE_CODES = frozenset({-32800, -32801, -32802})

_CAPABILITY = {
    "definition": "definitionProvider",
    "references": "referencesProvider",
    "hover": "hoverProvider",
    "symbols": "documentSymbolProvider",
    "workspace_symbols": "workspaceSymbolProvider",
}


class LspArgs(ToolArgs):
    """Arguments of ``lsp``."""

    action: LspAction = Field(
        description=(
            "definition, references, hover: need path, line and column. "
            "diagnostics, symbols: need path. workspace_symbols: needs query."
        )
    )
    path: str | None = Field(
        default=None,
        min_length=1,
        description=(
            "A file inside the workspace (relative to it, or absolute). For "
            "workspace_symbols it only picks the server by extension."
        ),
    )
    line: int | None = Field(default=None, ge=1, description="1-based line.")
    column: int | None = Field(
        default=None, ge=1, description="1-based column, counted in characters."
    )
    query: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Symbol name or part of one (workspace_symbols).",
    )

    @model_validator(mode="after")
    def _needs_of_action(self) -> Self:
        action = self.action
        if action in _POSITIONAL:
            missing = [n for n in ("path", "line", "column") if getattr(self, n) is None]
            if missing:
                raise ValueError(f"{action} needs path, line and column; missing {missing}")
        elif action in ("diagnostics", "symbols"):
            if self.path is None:
                raise ValueError(f"{action} needs path")
        elif self.query is None or not self.query.strip():
            raise ValueError("workspace_symbols needs a non-blank query")
        unused = [
            name
            for name in ("line", "column")
            if getattr(self, name) is not None and action not in _POSITIONAL
        ]
        if self.query is not None and action != "workspace_symbols":
            unused.append("query")
        if unused:
            raise ValueError(f"{action} does not take {', '.join(unused)}")
        return self


class LspTool(Tool[LspArgs]):
    """Ask the language server about definitions, references, types, errors and symbols."""

    name = "lsp"
    description = (
        "Ask the workspace's language server (pyright for Python) about code. "
        "definition, references, hover: give path, line and column (1-based; column counts "
        "characters) of a name. diagnostics: errors and warnings of a file. symbols: a "
        "file's outline. workspace_symbols: find symbols by name (query). Answers are "
        "'path:line:col  source line' locations, 'path:line:col severity message' "
        f"diagnostics, or an indented symbol tree; at most {MAX_ITEMS} entries. Paths must be "
        "inside the workspace. Files are read from disk, so edits show on the next call. "
        "The server starts on first use, which can take a while."
    )
    args_model = LspArgs
    declaration = INSPECTION
    rule_argument = "path"
    rule_match = "path"
    workspace_only = True

    def touched_paths(self, args: LspArgs) -> list[str]:
        """The file asked about; the whole workspace (``.``) for workspace_symbols."""
        return [args.path if args.path is not None else "."]

    async def run(self, args: LspArgs, ctx: ToolContext) -> ToolResult:
        """Answer one question, under the runtime's ``concurrency.lsp_requests`` bound."""
        from zuno.integrations.lsp.pool import LSP_SERVERS

        settings: LspSettings = ctx.config.lsp
        limiter = LSP_SERVERS.limiter(ctx.services, ctx.config.concurrency.lsp_requests)
        sources = SourceLines(ctx.workspace)
        async with limiter:
            try:
                if args.action == "workspace_symbols":
                    text = await _workspace_symbols(args, ctx, settings, sources)
                else:
                    text = await _file_action(args, ctx, settings, sources)
            except RequestTimeout as exc:
                raise TransientError(
                    f"{exc} (lsp.request_timeout); the server may still be analysing the "
                    "workspace: try again"
                ) from None
            except ServerExited as exc:
                raise TransientError(f"{exc}; the next call starts it again") from None
            except ServerUnavailable as exc:
                raise ToolError(str(exc)) from None
            except ResponseError as exc:
                if exc.code in _RETRYABLE_CODES:
                    raise TransientError(f"{exc}; try again") from None
                raise ToolError(str(exc)) from None
        bounded = bound_text(text, ctx.limits, lambda: ctx.artifact_path("lsp"), "answer")
        return ToolResult(
            output=bounded.text,
            data={"action": args.action},
            artifact=bounded.artifact,
        )


# --- servers ---------------------------------------------------------------------


def _argv(server: LspServerSettings, what: str, workspace: Path) -> list[str]:
    program = find_program(server.command[0], workspace)
    if program is None:
        how = server.install or "install it, or set its command in lsp.servers in zuno.json"
        raise ToolError(
            f"the language server for {what}, `{' '.join(server.command)}`, is not installed "
            f"(not found next to Python nor on PATH); to install: {how}"
        )
    return [program, *server.command[1:]]


async def _client(
    server: LspServerSettings, what: str, ctx: ToolContext, settings: LspSettings
) -> LspClient:
    from zuno.integrations.lsp.pool import LSP_SERVERS

    argv = _argv(server, what, ctx.workspace)
    extensions = [e for e, s in settings.all_servers().items() if s.command == server.command]
    try:
        return await LSP_SERVERS.client(
            argv,
            ctx.workspace,
            server,
            startup_timeout=settings.startup_timeout,
            extensions=extensions,
            sandbox=ctx.config.sandbox,
            protected=ctx.protected,
        )
    except ServerUnavailable as exc:
        how = server.install or "check lsp.servers in zuno.json"
        raise ToolError(f"{exc}\nTo install or fix it: {how}") from None


def _require(client: LspClient, action: str) -> None:
    capability = _CAPABILITY.get(action)
    if capability is not None and not client.supports(capability):
        raise ToolError(f"the language server {client.server_name} does not support {action}")


# --- actions on one file -----------------------------------------------------------


def _inside(raw: str, ctx: ToolContext) -> Path:
    try:
        return ctx.resolve_inside(raw)
    except (ValueError, RuntimeError) as exc:  # a NUL byte, "~user" that does not exist
        raise ArgumentsRejected(f"cannot use path {raw!r}: {exc}") from None


def _file(args: LspArgs, ctx: ToolContext) -> Path:
    assert args.path is not None
    path = _inside(args.path, ctx)
    if not path.is_file():
        what = "a folder" if path.is_dir() else "not found"
        raise ToolError(f"{args.path} is {what}; lsp needs an existing file")
    return path


def _server_for(path: Path, settings: LspSettings) -> LspServerSettings:
    server = settings.server_for(path)
    if server is None:
        known = ", ".join(sorted(settings.all_servers()))
        raise ToolError(
            f"no language server is configured for {path.suffix or 'extension-less'} files "
            f"(configured: {known}); add one under lsp.servers in zuno.json"
        )
    return server


async def _file_action(
    args: LspArgs, ctx: ToolContext, settings: LspSettings, sources: SourceLines
) -> str:
    path = _file(args, ctx)
    server = _server_for(path, settings)
    client = await _client(server, f"{path.suffix} files", ctx, settings)
    _require(client, args.action)
    try:
        await client.refresh_documents()
        doc = await client.open_document(path, settings.language_id(path, server))
    except OSError as exc:
        raise ToolError(f"cannot read {args.path}: {exc.strerror or exc}") from None
    timeout = settings.request_timeout
    uri = path_to_uri(path)
    if args.action == "diagnostics":
        items = await client.diagnostics(doc, timeout=timeout)
        return await _render(lambda: render_diagnostics(str(path), items, sources))
    if args.action == "symbols":
        symbols = await client.document_symbols(uri, timeout=timeout)
        return await _render(lambda: render_document_symbols(str(path), symbols, sources))
    at = _position(args, doc)
    where = f"{sources.shown(str(path))}:{args.line}:{args.column}"
    if args.action == "hover":
        hover = await client.hover(uri, at, timeout=timeout)
        return render_hover(hover) or f"No hover information at {where}."
    if args.action == "references":
        found = await client.references(uri, at, timeout=timeout)
        what = "references"
    else:
        found = await client.definition(uri, at, timeout=timeout)
        what = "definitions"
    locations = parse_locations(found)
    if not locations:
        return f"No {what} found at {where}."
    return await _render(lambda: render_locations(locations, sources, what))


def _position(args: LspArgs, doc: OpenDocument) -> tuple[int, int]:
    """The server's position (0-based line, UTF-16 character) of the asked line and column."""
    assert args.line is not None and args.column is not None
    lines = _LINE_BREAK.split(doc.text)
    if args.line > len(lines):
        count = len(lines) - (1 if lines[-1] == "" else 0)
        raise ArgumentsRejected(
            f"line {args.line} is past the end of {args.path}, which has {count} lines"
        )
    text = lines[args.line - 1]
    if args.column > len(text) + 1:
        raise ArgumentsRejected(
            f"column {args.column} is past the end of line {args.line} of {args.path}, "
            f"which has {len(text)} characters"
        )
    return args.line - 1, to_utf16(text, args.column)


async def _render(render: Callable[[], str]) -> str:
    # Rendering reads the quoted files: a thread keeps the event loop free.
    return await anyio.to_thread.run_sync(render, abandon_on_cancel=True)


# --- workspace symbols ---------------------------------------------------------------


async def _workspace_symbols(
    args: LspArgs, ctx: ToolContext, settings: LspSettings, sources: SourceLines
) -> str:
    assert args.query is not None
    if args.path is not None:
        path = _inside(args.path, ctx)
        servers = [(_server_for(path, settings), f"{path.suffix} files")]
    else:
        servers = _installed_servers(settings)
    results: list[types.SymbolInformation | types.WorkspaceSymbol] = []
    for server, what in servers:
        client = await _client(server, what, ctx, settings)
        _require(client, "workspace_symbols")
        await client.refresh_documents()
        results += await client.workspace_symbols(args.query, timeout=settings.request_timeout)
    query = args.query
    return await _render(lambda: render_workspace_symbols(query, results, sources))


def _installed_servers(settings: LspSettings) -> list[tuple[LspServerSettings, str]]:
    """Each configured server once (by command), when its program is installed."""
    by_command: dict[tuple[str, ...], tuple[LspServerSettings, list[str]]] = {}
    for ext, server in sorted(settings.all_servers().items()):
        entry = by_command.setdefault(tuple(server.command), (server, []))
        entry[1].append(ext)
    found = [
        (server, f"{'/'.join(exts)} files")
        for server, exts in by_command.values()
        if find_program(server.command[0]) is not None
    ]
    if not found:
        commands = "; ".join(
            f"`{' '.join(s.command)}` ({s.install or 'see lsp.servers'})"
            for s, _ in by_command.values()
        )
        raise ToolError(f"no configured language server is installed: {commands}")
    return found
