"""``zuno mcp``: serve Zuno over MCP, and inspect the configured MCP servers.

``zuno mcp serve`` exposes an agent's active tools to an MCP client (stdio by
default, or streamable HTTP on 127.0.0.1). ``zuno mcp tools`` connects the
servers of ``mcp.servers`` and lists their tools with the declarations Zuno
gives them, and the hints it does not believe.
"""

from __future__ import annotations

import errno
import json
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from zuno.cli.app import app
from zuno.cli.console import err, escape, out
from zuno.cli.errors import fail, user_errors, warn_control_paths, warn_untrusted
from zuno.cli.options import AgentOpt, Db, Json, Workspace
from zuno.cli.signals import run_until_stopped
from zuno.integrations.mcp import APPROVAL_NOTE

if TYPE_CHECKING:
    # The MCP SDK takes about a second to import: only the commands that speak MCP load
    # it; the configuration (pydantic models) is imported by the commands that read it.
    from zuno.config.loading import Config
    from zuno.integrations.mcp.client import McpConnection

__all__ = ["mcp_app"]

mcp_app = typer.Typer(
    help="MCP: serve Zuno's tools to MCP clients; list the configured servers' tools.",
    no_args_is_help=True,
)
app.add_typer(mcp_app, name="mcp")


@mcp_app.command(
    "serve",
    help=(
        "Serve an agent's active tools over MCP (stdio, or streamable HTTP on 127.0.0.1). "
        "Every call goes through Zuno's dispatcher and is recorded in the store. " + APPROVAL_NOTE
    ),
)
def serve(
    transport: Annotated[
        str,
        typer.Option(
            "--transport", "-t", help="stdio (the default), or http (on port 8765 unless --port)."
        ),
    ] = "",
    port: Annotated[
        int | None,
        typer.Option("--port", "-p", help="Serve streamable HTTP on 127.0.0.1:PORT (/mcp)."),
    ] = None,
    agent: AgentOpt = "build",
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Approve every call strict mode would ask about (nobody can be asked over MCP).",
        ),
    ] = False,
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", help="Record calls in this session (default: a new one)."),
    ] = None,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """Serve Zuno over MCP."""
    from zuno.policy.approvals import ApproveAll
    from zuno.serve.mcp_server import NoApprovalsOverMcp, ZunoMcpServer, bind_http
    from zuno.session.runtime import Runtime

    chosen = _transport(transport, port)
    listener: socket.socket | None = None
    if chosen == "http":
        # Bound first: a port in use is one line, before a store or session is opened.
        port = port or 8765
        try:
            listener = bind_http(port)
        except OSError as exc:
            why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc})"
            fail(f"port {port} on 127.0.0.1 {why}; choose another with --port")
    try:
        with user_errors():
            rt = Runtime(
                workspace, db_path=db, approver=ApproveAll() if yes else NoApprovalsOverMcp()
            )
        warn_untrusted(rt.config)
        warn_control_paths(rt)
        try:
            with user_errors():
                server = ZunoMcpServer(rt, agent=agent, session_id=session)
                if listener is not None:
                    run_until_stopped(server.serve_http, listener)
                else:
                    state = server.open_stdio_session()
                    # One line however narrow the terminal (or a client's log) is.
                    err.print(
                        f"[dim]zuno: serving the {agent!r} agent over MCP on stdio "
                        f"(session {state.session_id})[/]",
                        markup=True,
                        soft_wrap=True,
                    )
                    run_until_stopped(server.serve_stdio)
        except KeyboardInterrupt:
            pass
        finally:
            rt.close()
    finally:
        if listener is not None:
            listener.close()


def _transport(transport: str, port: int | None) -> Literal["stdio", "http"]:
    if transport not in ("", "stdio", "http"):
        fail(f"--transport must be stdio or http, not {transport!r}")
    if transport == "stdio" and port is not None:
        fail("--port serves streamable HTTP; drop --port, or use --transport http")
    if port is not None and not 1 <= port <= 65535:
        fail(f"--port must be 1..65535, not {port}")
    return "http" if transport == "http" or port is not None else "stdio"


def _tool_rows(connection: McpConnection) -> list[dict[str, Any]]:
    from zuno.integrations.mcp.remote import McpTool, remote_tools

    rows: list[dict[str, Any]] = []
    for tool in remote_tools(connection):
        row: dict[str, Any] = {
            "server": connection.name,
            "name": tool.name,
            **tool.declaration.as_dict(),
        }
        if isinstance(tool, McpTool):
            annotations = tool.remote.annotations
            row |= {
                "remote_name": tool.remote_name,
                "declared_by": tool.choice.source,
                "hints": annotations.model_dump(exclude_none=True) if annotations else {},
                "notes": list(tool.choice.notes),
            }
        else:
            row |= {
                "remote_name": None,
                "declared_by": "resource read (an inspection)",
                "hints": {},
                "notes": [f"{len(connection.resources)} resource(s)"],
            }
        row["description"] = tool.description
        row["parameters"] = tool.schema()
        rows.append(row)
    offered = {t.name for t in connection.tools}
    for missing in sorted(set(connection.settings.tools) - offered):
        rows.append(
            {
                "server": connection.name,
                "name": None,
                "remote_name": missing,
                "notes": [f"configured tool {missing!r} is not offered by the server"],
            }
        )
    return rows


async def _collect(config: Config, workspace: Path, only: list[str] | None) -> list[dict[str, Any]]:
    from zuno.integrations.mcp.client import connect_mcp_servers

    async with connect_mcp_servers(config, workspace, only=only) as servers:
        return [row for c in servers.connections for row in _tool_rows(c)]


@mcp_app.command("tools")
def tools(
    server: Annotated[
        list[str] | None,
        typer.Option("--server", help="Only this server (repeatable; disabled ones too)."),
    ] = None,
    json_: Json = False,
    workspace: Workspace = Path("."),
) -> None:
    """Connect the configured MCP servers and list their tools with Zuno's declarations."""
    from zuno.config.loading import load_config

    with user_errors():
        config = load_config(workspace.resolve())
        warn_untrusted(config)
        unknown = [name for name in server or [] if name not in config.mcp.servers]
        if unknown:
            known = ", ".join(config.mcp.servers) or "none"
            fail(f"no MCP server named {', '.join(unknown)} in zuno.json; configured: {known}")
        import anyio  # imported by the commands that run: not for `zuno --help`

        rows = anyio.run(_collect, config, workspace, server or None)
    if json_:
        sys.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
        return
    if not config.mcp.servers:
        out.print('No MCP servers are configured (add them under "mcp": {"servers": ...}).')
        return
    for name, settings in config.mcp.servers.items():
        if not settings.enabled and name not in (server or []):
            out.print(f"[dim]{escape(name)}: disabled (not connected)[/]", markup=True)
    _print_rows(rows, config)


def _print_rows(rows: list[dict[str, Any]], config: Config) -> None:
    """One block per server: its tools, their declarations, and the hints not believed."""
    for name, settings in config.mcp.servers.items():
        mine = [row for row in rows if row["server"] == name]
        if not mine:
            continue
        trust = "trusted" if settings.trusted else "untrusted"
        out.print(f"[bold]{escape(name)}[/] ({trust}: {escape(settings.describe())})", markup=True)
        for row in mine:
            if row["name"] is None:
                out.print(f"  ! {row['notes'][0]}", markup=False, style="yellow")
                continue
            decl = f"{row['effect']} / {row['replay']} / {row['concurrency']}"
            out.print(f"  {row['name']}  {decl}  [{row['declared_by']}]", markup=False)
            hints = ", ".join(f"{k}={v}" for k, v in row["hints"].items() if k != "title")
            if row["notes"]:
                out.print(f"      {'; '.join(row['notes'])}", markup=False, style="yellow")
            elif hints:
                out.print(f"      hints: {hints}", markup=False, style="dim")
