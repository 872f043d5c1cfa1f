"""Zuno over MCP: an agent's active surface served as MCP tools.

Each tool keeps its description and JSON Schema; its annotations come from its
declaration (``read_only_hint`` for ReadOnly, ``destructive_hint`` for
SideEffecting, ``idempotent_hint`` for Safe, ``open_world_hint`` for what
reaches past the workspace). The surface is read at each request, so the
configured MCP servers' tools are listed once the runtime has connected them.
Every call goes through
:meth:`zuno.session.runtime.Runtime.dispatch` (architecture invariant 1) in a Zuno
session opened for the MCP connection, so it is validated, classified,
authorized and recorded exactly like a model's call.

Approvals cannot be asked over MCP (stdio is the protocol; an HTTP client is
not a person at a terminal). Unless the server runs with ``--yes``
(:class:`~zuno.policy.approvals.ApproveAll`) or ``permission.rules`` allow a call,
what strict mode would ask is denied by :class:`NoApprovalsOverMcp`, and the
result says so.

Sessions: one Zuno session per client connection. A stdio server serves one
connection. Over streamable HTTP a client on the handshake protocol has an
``mcp-session-id`` and gets its own Zuno session, opened at its first call; the
stateless 2026 protocol has no connection identity, so its calls share one
session, also opened at the first call (``--session`` names one for every
connection). A connection's requests run at once, each its own step, under
the session's barrier (:class:`zuno.dispatch.scheduling.SessionBarrier`): an Exclusive
call waits for the calls running and holds back the later ones, and the
inspection rule sees the failures of the steps before it.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any, cast

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from zuno.contract.tool import Tool
from zuno.core.declarations import Effect, Outcome, Replay
from zuno.dispatch.dispatcher import CallRequest, CallResult
from zuno.dispatch.session_state import SessionState
from zuno.integrations.mcp import APPROVAL_NOTE
from zuno.integrations.mcp.remote import McpResourceTool, McpTool
from zuno.policy.approvals import ApprovalDecision, ApprovalRequest
from zuno.serve.stdin import claimed_stdin
from zuno.session.runtime import Runtime

__all__ = [
    "APPROVAL_NOTE",
    "CALL_META_KEY",
    "OUTPUT_SCHEMA",
    "NoApprovalsOverMcp",
    "ZunoMcpServer",
    "annotations_for",
    "bind_http",
    "call_meta",
    "open_world",
    "structured_result",
]


class NoApprovalsOverMcp:
    """Denies every approval request, remembering which calls it denied.

    The name starts with ``deny`` so the dispatcher tells the model that no one
    was available to approve (rather than that a person refused).
    """

    name = "deny (approvals cannot be asked over MCP)"

    def __init__(self) -> None:
        self.denied: set[str] = set()
        """The call ids this approver denied."""

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.denied.add(request.call_id)
        return ApprovalDecision.DENY


def annotations_for(tool: Tool[Any], *, network: bool = False) -> types.ToolAnnotations:
    """MCP annotations derived from a tool's declaration.

    ``network`` is whether the sandbox lets commands reach the network
    (``sandbox.network``): it decides the open world of ``shell`` and its kin.
    """
    decl = tool.declaration
    return types.ToolAnnotations(
        read_only_hint=decl.effect is Effect.READ_ONLY and not tool.mixed,
        destructive_hint=decl.effect is Effect.SIDE_EFFECTING or tool.mixed,
        idempotent_hint=decl.replay is Replay.SAFE,
        open_world_hint=open_world(tool, network=network),
    )


def open_world(tool: Tool[Any], *, network: bool = False) -> bool:
    """Whether a tool may reach past the workspace and the local processes.

    Delegating calls run children that may use any tool; MCP servers' tools and
    the web tools reach other systems; commands do when the sandbox has the
    network. Everything else works on the workspace (closed world).
    """
    from zuno.tools.background import BgTool
    from zuno.tools.shell import ExecuteTool, ShellTool
    from zuno.tools.web import WebFetchTool
    from zuno.tools.web_search import WebSearchTool

    if tool.declaration.effect is Effect.DELEGATING:
        return True
    if isinstance(tool, McpTool | McpResourceTool | WebFetchTool | WebSearchTool):
        return True
    if isinstance(tool, ShellTool | ExecuteTool | BgTool):
        return network
    return False


CALL_META_KEY = "zuno/call"
"""The ``_meta`` key of a served result that holds the call's record (:func:`call_meta`)."""

OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "output": {
            "type": "string",
            "description": "What the tool said: its output, or why the call failed or was refused.",
        }
    },
    "required": ["output"],
    "additionalProperties": True,
}
"""The ``outputSchema`` of every served tool: the output text, then the tool's own fields."""


def structured_result(text: str, result: CallResult) -> dict[str, Any]:
    """A served result's ``structuredContent``: the output, then the tool's structured fields.

    ``text`` is the output as the text block says it (a failure's reason
    included), so a client that reads only the structured content (pydantic-ai
    does when every block is text) gets what a model needs.
    """
    fields = {k: v for k, v in (result.data or {}).items() if k != "output"}
    return {"output": text, **fields}


def call_meta(result: CallResult) -> dict[str, Any]:
    """The call's record for the client program, under ``_meta`` (:data:`CALL_META_KEY`).

    Not part of what a model reads: the outcome, the ids to find the call in
    the store (``zuno show``), and the declaration it ran under.
    """
    decl = result.declaration.as_dict() if result.declaration else {}
    return {
        "outcome": result.outcome.value,
        "block_kind": result.block_kind.value if result.block_kind else None,
        "call_id": result.call_id,
        "session_id": result.session_id,
        "attempt": result.attempt,
        **decl,
        "artifact": result.artifact,
    }


def _outcome_line(result: CallResult) -> str:
    kind = f" ({result.block_kind.value})" if result.block_kind else ""
    meaning = {
        Outcome.BLOCKED: "nothing was run",
        Outcome.ERROR: "it ran and failed",
        Outcome.UNCERTAIN: "it may or may not have taken effect; it will not be run again",
    }.get(result.outcome, "")
    return f"Outcome: {result.outcome.value}{kind}: {meaning}."


class ZunoMcpServer:
    """The MCP server of one runtime and one agent."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        agent: str = "build",
        session_id: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.agent = agent
        runtime.agent_settings(agent)  # an unknown agent fails now, not at the first call
        self._named: SessionState | None = None
        if session_id is not None:
            # Resuming checks the id now; it creates nothing.
            self._named = runtime.open_session(session_id, agent=agent)
        self._shared: SessionState | None = None
        self._connections: dict[str, SessionState] = {}

    # Handlers -----------------------------------------------------------------

    def tools(self) -> list[Tool[Any]]:
        """The agent's active surface now (configured servers' tools once connected)."""
        return list(self.runtime.surface(self.agent).tools)

    def list_tools(self) -> list[types.Tool]:
        """The active surface as MCP tools, in the surface's order."""
        # Through the egress proxy ("proxy") commands still reach other systems.
        network = self.runtime.config.sandbox.network is not False
        return [
            types.Tool(
                name=tool.name,
                description=tool.description,
                input_schema=tool.schema(),
                output_schema=OUTPUT_SCHEMA,
                annotations=annotations_for(tool, network=network),
            )
            for tool in self.tools()
        ]

    def _input_schema(self, name: str) -> dict[str, Any] | None:
        tool = self.runtime.surface(self.agent).get(name)
        return tool.schema() if tool is not None else None

    def open_stdio_session(self) -> SessionState:
        """The session of the one stdio connection (opened now unless ``--session`` named one)."""
        return self.session_for(None)

    def session_for(self, connection: str | None) -> SessionState:
        """The Zuno session of an MCP connection (None: the requests without one)."""
        if self._named is not None:
            return self._named
        if connection is None:
            if self._shared is None:
                self._shared = self.runtime.open_session(agent=self.agent, title="MCP client")
            return self._shared
        state = self._connections.get(connection)
        if state is None:
            state = self.runtime.open_session(agent=self.agent, title=f"MCP client {connection}")
            self._connections[connection] = state
        return state

    async def call(
        self, name: str, arguments: dict[str, Any] | None, connection: str | None = None
    ) -> types.CallToolResult:
        """Dispatch one call (the one door) and shape its result for MCP."""
        session = self.session_for(connection)
        (result,) = await self.runtime.dispatch(session, [CallRequest(name, arguments or {})])
        # The store defers blocked rows and step closes to its next write; this
        # process lives on, so commit them now for other readers (`zuno show`).
        self.runtime.store.flush()
        text = result.output
        failed = result.outcome is not Outcome.OK or result.is_error
        if result.outcome is not Outcome.OK:
            text = f"{_outcome_line(result)}\n{text}"
        approver = self.runtime.approver
        if isinstance(approver, NoApprovalsOverMcp) and result.call_id in approver.denied:
            text += f"\n{APPROVAL_NOTE}"
        content: list[types.ContentBlock] = [types.TextContent(type="text", text=text)]
        for image in result.images:  # a read of a PNG: the image itself, as MCP image content
            data = image.base64_data()
            if data is not None:
                content.append(
                    types.ImageContent(type="image", data=data, mime_type=image.media_type)
                )
        return types.CallToolResult(
            content=content,
            structured_content=structured_result(text, result),
            _meta={CALL_META_KEY: call_meta(result)},
            is_error=failed,
        )

    # The SDK server -----------------------------------------------------------

    def build(self) -> Server[Any]:
        """The SDK's low-level server with this surface's handlers."""

        async def on_list_tools(
            ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
        ) -> types.ListToolsResult:
            return types.ListToolsResult(tools=self.list_tools())

        async def on_call_tool(
            ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
        ) -> types.CallToolResult:
            return await self.call(params.name, params.arguments, _connection_of(ctx))

        from zuno.core.installed import installed_version

        return Server(
            "zuno",
            version=installed_version(),
            title=f"Zuno ({self.agent} agent)",
            instructions=(
                f"Zuno's tools for the {self.agent!r} agent in {self.runtime.workspace}. "
                "Every call is validated, authorized and recorded; a result whose outcome "
                "is blocked changed nothing."
            ),
            get_tool_input_schema=self._input_schema,
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
        )

    async def serve_stdio(self) -> None:
        """Serve one client over stdin and stdout until it disconnects (or a stop cancels it)."""
        server = self.build()
        with claimed_stdin() as lines:
            # The SDK takes any object it can read lines from with `async for`.
            stdin = cast(Any, lines)
            async with self.runtime, stdio_server(stdin=stdin) as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())

    async def serve_http(self, listener: socket.socket) -> None:
        """Serve streamable HTTP on a bound socket (``http://host:port/mcp``) until interrupted."""
        import anyio
        import uvicorn

        class QuietServer(uvicorn.Server):
            """uvicorn without its own signal handlers: SIGTERM and Ctrl-C reach Zuno's."""

            @contextmanager
            def capture_signals(self) -> Generator[None]:
                yield

        host, port = listener.getsockname()[:2]
        sdk_server = self.build()
        app = _handshake_only(sdk_server.streamable_http_app(host=host))
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        server = QuietServer(config)
        ended = anyio.Event()

        async def serve() -> None:
            # Shielded: a stop is uvicorn's own graceful shutdown (should_exit), so
            # its lifespan ends normally instead of logging a cancelled traceback.
            with anyio.CancelScope(shield=True):
                try:
                    await server.serve(sockets=[listener])
                finally:
                    ended.set()

        async with self.runtime:
            print(
                f"zuno: serving the {self.agent!r} agent over MCP at http://{host}:{port}/mcp "
                "(a session per client connection)",
                file=sys.stderr,
                flush=True,
            )
            async with anyio.create_task_group() as tg:
                tg.start_soon(serve)
                try:
                    await ended.wait()
                finally:
                    server.should_exit = True
                    # uvicorn waits for open responses to end before it stops, and a
                    # client's event stream (GET) never ends by itself: close those
                    # until the server has stopped (a client may reopen one meanwhile).
                    # Calls in flight finish and are answered.
                    with anyio.CancelScope(shield=True):
                        while not ended.is_set():
                            _close_event_streams(sdk_server)
                            with anyio.move_on_after(0.2):
                                await ended.wait()


def _close_event_streams(sdk_server: Server[Any]) -> None:
    """Close every HTTP session's standalone event stream (the client's GET).

    The SDK keeps its sessions' transports in a private table; it is read
    defensively, so a change there leaves a stop waiting for clients to leave
    rather than failing.
    """
    try:
        manager = sdk_server.session_manager
    except RuntimeError:
        return
    transports: Any = getattr(manager, "_server_instances", None)
    if not isinstance(transports, dict):
        return
    for transport in list(cast(dict[str, Any], transports).values()):
        close: Any = getattr(transport, "close_standalone_sse_stream", None)
        if callable(close):
            close()


def bind_http(port: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening socket for ``serve_http``, bound before anything else is opened.

    Raises:
        OSError: the port cannot be bound (in use, or not permitted).
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, port))
        listener.listen(128)
    except OSError:
        listener.close()
        raise
    listener.set_inheritable(True)
    return listener


def _handshake_only(app: Any) -> Any:
    """The HTTP app, answering stateless-protocol requests with "use the handshake".

    A session per client connection needs a connection identity; only the
    handshake protocol has one (``mcp-session-id``). A client on the stateless
    2026 protocol is told which versions are supported and, like the SDK's
    ``mode="auto"``, falls back to the handshake.
    """

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = cast(list[tuple[bytes, bytes]], scope["headers"])
            version = next((v.decode("latin-1") for k, v in headers if k == _VERSION), None)
            if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
                data = {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version}
                error = {
                    "code": UNSUPPORTED_PROTOCOL_VERSION,
                    "message": "this server speaks the initialize handshake (a session per client)",
                    "data": data,
                }
                body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 400,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return asgi


_VERSION = b"mcp-protocol-version"


def _connection_of(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The HTTP ``mcp-session-id`` of a request, when its protocol has one."""
    headers: Any = getattr(ctx.request, "headers", None)
    if headers is None:
        return None
    value: Any = headers.get("mcp-session-id")
    return value if isinstance(value, str) and value else None
