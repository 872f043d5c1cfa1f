"""Zuno over MCP: an agent's active surface served as MCP tools.

Each tool keeps its description and JSON Schema; its annotations come from its
declaration (``read_only_hint`` for ReadOnly, ``destructive_hint`` for
SideEffecting, ``idempotent_hint`` for Safe). Every call goes through
:meth:`zuno.runtime.Runtime.dispatch` (architecture invariant 1) in a Zuno
session opened for the MCP connection, so it is validated, classified,
authorized and recorded exactly like a model's call.

Approvals cannot be asked over MCP (stdio is the protocol; an HTTP client is
not a person at a terminal). Unless the server runs with ``--yes``
(:class:`~zuno.permissions.ApproveAll`) or ``permission.rules`` allow a call,
what strict mode would ask is denied by :class:`NoApprovalsOverMcp`, and the
result says so.

Sessions: a stdio server serves one connection, so one Zuno session. Over
streamable HTTP a client on the handshake protocol has an ``mcp-session-id``
and gets its own Zuno session; the stateless 2026 protocol has no connection
identity, so its calls share the server's session.
"""

from __future__ import annotations

import sys
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

from zuno.declarations import Effect, Outcome, Replay
from zuno.dispatch import CallRequest, CallResult
from zuno.permissions import ApprovalDecision, ApprovalRequest
from zuno.runtime import Runtime, SessionState
from zuno.tool import Tool

__all__ = ["APPROVAL_NOTE", "NoApprovalsOverMcp", "ZunoMcpServer", "annotations_for"]

APPROVAL_NOTE = (
    "Approvals cannot be asked over MCP, so what strict mode would ask is denied. "
    "To allow such calls, restart `zuno mcp serve --yes`, or allow this tool with a "
    "permission rule in zuno.json (permission.rules)."
)


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


def annotations_for(tool: Tool[Any]) -> types.ToolAnnotations:
    """MCP annotations derived from a tool's declaration."""
    decl = tool.declaration
    return types.ToolAnnotations(
        read_only_hint=decl.effect is Effect.READ_ONLY and not tool.mixed,
        destructive_hint=decl.effect is Effect.SIDE_EFFECTING or tool.mixed,
        idempotent_hint=decl.replay is Replay.SAFE,
    )


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
        self.surface = runtime.surface(agent)
        self.session = runtime.open_session(session_id, agent=agent, title="MCP client")
        """The session of the stdio connection (and of stateless HTTP calls)."""
        self._http_sessions: dict[str, SessionState] = {}
        self._schemas = {tool.name: tool.schema() for tool in self.surface.tools}

    # Handlers -----------------------------------------------------------------

    def list_tools(self) -> list[types.Tool]:
        """The active surface as MCP tools, in the surface's order."""
        return [
            types.Tool(
                name=tool.name,
                description=tool.description,
                input_schema=self._schemas[tool.name],
                annotations=annotations_for(tool),
            )
            for tool in self.surface.tools
        ]

    def session_for(self, connection: str | None) -> SessionState:
        """The Zuno session of an MCP connection (None: the server's own)."""
        if connection is None:
            return self.session
        state = self._http_sessions.get(connection)
        if state is None:
            state = self.runtime.open_session(agent=self.agent, title=f"MCP client {connection}")
            self._http_sessions[connection] = state
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
        decl = result.declaration.as_dict() if result.declaration else {}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content={
                "outcome": result.outcome.value,
                "block_kind": result.block_kind.value if result.block_kind else None,
                "call_id": result.call_id,
                "session_id": result.session_id,
                **decl,
            },
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

        return Server(
            "zuno",
            title=f"Zuno ({self.agent} agent)",
            instructions=(
                f"Zuno's tools for the {self.agent!r} agent in {self.runtime.workspace}. "
                "Every call is validated, authorized and recorded; a result whose outcome "
                "is blocked changed nothing."
            ),
            get_tool_input_schema=self._schemas.get,
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
        )

    async def serve_stdio(self) -> None:
        """Serve one client over stdin and stdout until it disconnects."""
        server = self.build()
        async with self.runtime, stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    async def serve_http(self, port: int, host: str = "127.0.0.1") -> None:
        """Serve streamable HTTP at ``http://host:port/mcp`` until interrupted."""
        import uvicorn

        app = self.build().streamable_http_app(host=host)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        async with self.runtime:
            print(
                f"zuno: serving the {self.agent!r} agent over MCP at http://{host}:{port}/mcp "
                f"(session {self.session.session_id})",
                file=sys.stderr,
                flush=True,
            )
            await uvicorn.Server(config).serve()


def _connection_of(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The HTTP ``mcp-session-id`` of a request, when its protocol has one."""
    headers: Any = getattr(ctx.request, "headers", None)
    if headers is None:
        return None
    value: Any = headers.get("mcp-session-id")
    return value if isinstance(value, str) and value else None
