"""Connections to the configured MCP servers, and their tools for the registry.

A program embedding Zuno connects the servers for as long as its runtime
lives, and passes their tools to the runtime beside the built-in ones::

    async with connect_mcp_servers(config, workspace) as servers:
        runtime = Runtime(workspace, tools=[*builtin_tools(config), *servers.tools()])
        async with runtime:
            ...

Every request to a server goes through one :class:`anyio.CapacityLimiter`
(``concurrency.mcp_connections``), shared by all the servers of one
:class:`McpServers`.

Each connection lives in a task of its own, so whatever breaks inside the SDK's
task group for one server ends that connection only, never the batch calling
it, the built-in tools or the other servers. A call waiting on a connection
that ends mid-request ends then too.

How a call can fail, and what the dispatcher makes of it::

    known before sending that nothing can be sent      -> ToolUnavailable  (blocked: unavailable)
      (the server is gone; an HTTP connection refused)
    server answered with a JSON-RPC error            -> ToolError        (error: the server refused)
    transport failed or timed out after sending      -> UncertainOutcome (Never: it may have run)
                                                     -> TransientError   (Safe: may be tried again)
    the result says is_error                         -> an error result with the server's text

A server that cannot be started, connected or listed is a startup error
(:class:`McpServerError`) naming the server and its command. A runtime connects
with ``skip_failed``: such a server is then left out (its tools are not
registered) and its error kept in :attr:`McpServers.failures`, so one broken
server never takes the built-in tools or the other servers with it.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import IO, Any, TypeVar, cast

import anyio
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

from zuno.config.loading import Config
from zuno.config.mcp import McpServerSettings
from zuno.config.sandbox import SandboxSettings
from zuno.contract.tool import Tool, ToolError, ToolUnavailable, TransientError, UncertainOutcome
from zuno.core.declarations import Replay
from zuno.execution.server_launch import confined, server_launch
from zuno.integrations.mcp.errors import McpServerError
from zuno.integrations.mcp.http import LOST, NOT_SENT, failure_kind, resilient_http_client
from zuno.policy.control_paths import control_paths

__all__ = ["McpConnection", "McpServerError", "McpServers", "connect_mcp_servers"]

_STDERR_TAIL = 2000
"""How much of a failed server's stderr an error message quotes."""

R = TypeVar("R")

# The SDK logs a server's unparsable output (and other faults Zuno reports in its
# own words) with tracebacks. With no handler anywhere, Python's last-resort
# handler would print them on the user's terminal; this one keeps them off it.
# An application that configures logging still receives them (they propagate).
logging.getLogger("mcp").addHandler(logging.NullHandler())


class _ConnectionEnded(Exception):
    """The connection's task ended while a request was waiting for its answer."""


def _flatten(exc: BaseException) -> BaseException:
    """The first real error inside exception groups (task groups wrap transport errors)."""
    if isinstance(exc, BaseExceptionGroup):
        inner = cast(BaseExceptionGroup[BaseException], exc).exceptions
        if inner:
            return _flatten(inner[0])
    return cast(BaseException, exc)


def _unparsed_line(exc: Exception) -> str:
    """The text the SDK could not parse as a protocol message (its error, if not known)."""
    errors: Any = getattr(exc, "errors", None)
    if callable(errors):
        try:
            found: Any = errors()
            value: Any = found[0].get("input") if found else None
        except Exception:  # a description, never a reason to fail
            value = None
        if isinstance(value, str | bytes):
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            return text[:200]
    return (str(exc) or type(exc).__name__)[:200]


def _seen_closed(client: Client) -> bool:
    """Whether the SDK has already seen this connection end, so nothing can be sent.

    The SDK raises the same "connection closed" error whether a request was
    never written or its answer was lost; only this state tells them apart.
    It is not public API, so it is read defensively: when it cannot be read,
    a failure stays uncertain (the safe side for a Never call).
    """
    dispatcher: object = getattr(client.session, "_dispatcher", None)
    return getattr(dispatcher, "_closed", False) is True


async def _no_output_validation(name: str, result: types.CallToolResult) -> None:
    """Stands in for the SDK's output-schema check, which raises and drops the result.

    :class:`zuno.integrations.mcp.remote.McpTool` checks ``outputSchema`` itself, so a result
    that breaks it is an error that keeps what the server sent.
    """


class McpConnection:
    """One connected MCP server: its listing and a way to call it.

    Built and entered by :class:`McpServers`; tools hold a reference and call
    :meth:`call_tool` and :meth:`read_resource`.
    """

    def __init__(
        self,
        name: str,
        settings: McpServerSettings,
        workspace: Path,
        limiter: anyio.CapacityLimiter,
        sandbox: SandboxSettings | None = None,
        protected: Sequence[Path] = (),
    ) -> None:
        self.name = name
        self.settings = settings
        self.workspace = workspace
        self.sandbox = sandbox or SandboxSettings()
        """The sandbox a stdio server runs under (see
        :func:`zuno.execution.server_launch.confined`).
        """
        self.protected = tuple(protected)
        self.tools: list[types.Tool] = []
        """The server's tools, as it listed them at connection."""
        self.resources: list[types.Resource] = []
        """The server's resources (empty when it has none or does not offer any)."""
        self.server_info: types.Implementation | None = None
        self._limiter = limiter
        self._client: Client | None = None
        self._lost: str | None = None
        """Why the connection is known to be gone (set by the first failure seen)."""
        self._stderr: IO[str] | None = None
        self._not_protocol: str | None = None
        """The first line the server wrote that was not a protocol message (cut to 200)."""
        self._closing = anyio.Event()
        """Set to end the connection's task."""
        self._ended = anyio.Event()
        """Set when the connection's task has ended (closed, or broken)."""

    # Connecting ---------------------------------------------------------------

    def _transport(self, stack: AsyncExitStack) -> Any:
        settings = self.settings
        if settings.url is not None:
            http = resilient_http_client()
            stack.push_async_callback(http.aclose)
            return streamable_http_client(settings.url, http_client=http)
        assert settings.command is not None
        # The server's stderr goes to a file: it must not scribble over the terminal
        # (or over stdout when Zuno itself is an MCP server), and its tail explains
        # a failure to start.
        self._stderr = tempfile.TemporaryFile(  # noqa: SIM115 - closed by close()
            "w+", encoding="utf-8", errors="replace"
        )
        # The library starts the program with its minimal safe environment plus
        # these variables; the launch adds the workspace, PYTHONSAFEPATH and a PATH
        # without the workspace's programs (see zuno.execution.server_launch).
        base = {**get_default_environment(), **settings.env}
        launch = server_launch(
            [settings.command, *settings.args],
            self.workspace,
            base,
            from_workspace=settings.from_workspace,
            cwd=self.workspace / settings.cwd if settings.cwd else None,
        )
        if settings.sandbox or settings.from_workspace:
            launch = stack.enter_context(
                confined(
                    launch,
                    self.sandbox,
                    workspace=self.workspace,
                    network=settings.network,
                    protected=self.protected,
                    explicit_env=settings.env,
                )
            )
        params = StdioServerParameters(
            command=launch.argv[0],
            args=launch.argv[1:],
            env=launch.env,
            cwd=str(launch.cwd),
        )
        return stdio_client(params, errlog=self._stderr)

    def stderr_tail(self) -> str:
        """The end of what a stdio server wrote to stderr (empty for HTTP servers)."""
        if self._stderr is None:
            return ""
        try:
            self._stderr.flush()
            self._stderr.seek(0)
            text = self._stderr.read()
        except (OSError, ValueError):
            return ""
        return text[-_STDERR_TAIL:].strip()

    def _startup_error(self, what: str, exc: BaseException) -> McpServerError:
        exc = _flatten(exc)
        detail = str(exc) or type(exc).__name__
        if isinstance(exc, MCPError) and failure_kind(exc.code, exc.data) is not None:
            detail = exc.message
        elif isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
            detail = "it closed the connection before answering (did it exit?)"
        elif isinstance(exc, MCPError):
            detail = f"{exc.message} (code {exc.code})"
        elif isinstance(exc, TimeoutError):
            detail = f"no answer within {self.settings.startup_timeout:g}s (startup_timeout)"
        elif isinstance(exc, FileNotFoundError):
            detail = f"{self.settings.command!r} was not found; check the command and PATH"
        if self._not_protocol is not None:
            detail += (
                f"; it wrote a line that is not JSON-RPC on stdout ({self._not_protocol!r}): "
                "a stdio MCP server may write only protocol messages there, logs go to stderr"
            )
        stderr = self.stderr_tail()
        where = "url" if self.settings.url else "command"
        head = f"MCP server {self.name!r} ({where}: {self.settings.describe()}) {what}: {detail}"
        last = stderr.splitlines()[-1].strip() if stderr else ""
        tail = f" (its stderr ends with: {last[-200:]})" if last else ""
        return McpServerError(
            head
            + (f"\nits stderr ends with:\n{stderr}" if stderr else "")
            + f'\nFix mcp.servers.{self.name} in zuno.json, or set its "enabled" to false.',
            server=self.name,
            summary=" ".join((head + tail).split()),
            reason=" ".join(f"{what}: {detail}{tail}".split()),
        )

    async def _on_message(self, message: types.ServerNotification | Exception) -> None:
        """The client's message handler: keeps the first line that was not a protocol message.

        The SDK hands a line it cannot parse to this handler (and logs it; see
        the ``mcp`` logger's handler below); a startup error then quotes it.
        """
        if isinstance(message, Exception) and self._not_protocol is None:
            self._not_protocol = _unparsed_line(message)

    async def connect(self, tg: TaskGroup) -> None:
        """Start or reach the server and list its tools and resources, in a task of ``tg``.

        Returns once the server is listed; the connection then lives in that
        task until :meth:`close` (anyio's cancel scopes require the client to
        be entered and exited by one task).

        Raises:
            McpServerError: the server could not be started, connected or listed.
        """
        await tg.start(self._live)

    async def _live(self, *, task_status: TaskStatus[None]) -> None:
        started = False
        try:
            async with AsyncExitStack() as stack:
                try:
                    # No fail_after around entering: the client opens task groups that
                    # must outlive this block. Its own read timeout bounds the handshake.
                    client = Client(
                        self._transport(stack),
                        mode="auto",
                        read_timeout_seconds=self.settings.startup_timeout,
                        message_handler=self._on_message,
                    )
                    await stack.enter_async_context(client)
                except Exception as exc:
                    raise self._startup_error("failed to start", exc) from exc
                try:
                    with anyio.fail_after(self.settings.startup_timeout):
                        self.server_info = client.server_info
                        self.tools = await self._list_tools(client)
                        if client.server_capabilities.resources is not None:
                            self.resources = await self._list_resources(client)
                except Exception as exc:
                    raise self._startup_error("started but could not be listed", exc) from exc
                # Set on the instance: the SDK's check raises and drops the result.
                client.session.validate_tool_result = _no_output_validation  # type: ignore[method-assign]
                self._client = client
                started = True
                task_status.started()
                await self._closing.wait()
        except Exception as exc:
            if not started:
                raise
            # The connection broke inside the SDK: this server is gone, nothing else is.
            cause = _flatten(exc)
            self._lost = self._lost or (
                f"its connection failed ({type(cause).__name__}: {cause})"
                if str(cause)
                else f"its connection failed ({type(cause).__name__})"
            )
        finally:
            self._ended.set()

    @staticmethod
    async def _list_tools(client: Client) -> list[types.Tool]:
        listing: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(100):  # a server that paginates forever cannot hang startup
            page = await client.list_tools(cursor=cursor)
            listing.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return listing

    @staticmethod
    async def _list_resources(client: Client) -> list[types.Resource]:
        listing: list[types.Resource] = []
        cursor: str | None = None
        for _ in range(100):
            page = await client.list_resources(cursor=cursor)
            listing.extend(page.resources)
            cursor = page.next_cursor
            if cursor is None:
                break
        return listing

    @property
    def connected(self) -> bool:
        """Whether the server is connected as far as Zuno knows."""
        return (
            self._client is not None
            and self._lost is None
            and not self._ended.is_set()
            and not _seen_closed(self._client)
        )

    # Calling ------------------------------------------------------------------

    def _unavailable(self, why: str) -> ToolUnavailable:
        stderr = self.stderr_tail()
        return ToolUnavailable(
            f"the MCP server {self.name!r} is unavailable ({why}); the call was not sent"
            + (f". Its stderr ends with:\n{stderr[-500:]}" if stderr else "")
        )

    def _usable(self) -> Client:
        if self._lost is None and self._client is not None and self._ended.is_set():
            self._lost = "its connection ended"
        if self._lost is not None or self._client is None:
            raise self._unavailable(
                f"{self._lost or 'it is not connected'}; restart Zuno to reconnect it"
            )
        if _seen_closed(self._client):
            self._lost = "its connection closed"
            raise self._unavailable(f"{self._lost}; restart Zuno to reconnect it")
        return self._client

    async def _while_connected(self, request: Callable[[], Awaitable[R]]) -> R:
        """Await ``request``, or raise :class:`_ConnectionEnded` when the connection ends first."""
        answer: list[R] = []
        failure: list[Exception] = []
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                await self._ended.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            try:
                answer.append(await request())
            except Exception as exc:
                failure.append(exc)
            finally:
                tg.cancel_scope.cancel()
        if failure:
            raise failure[0]
        if not answer:
            raise _ConnectionEnded
        return answer[0]

    def _after_send_failure(self, why: str, replay: Replay, what: str) -> Exception:
        if replay is Replay.NEVER:
            return UncertainOutcome(
                f"{what} was sent to the MCP server {self.name!r}, then {why}; "
                "the server may or may not have carried it out"
            )
        return TransientError(f"{what}: the MCP server {self.name!r} {why}")

    async def call_tool(
        self, remote_name: str, arguments: dict[str, Any], *, replay: Replay
    ) -> types.CallToolResult:
        """Call one of the server's tools (see the module docstring for the failures)."""
        async with self._limiter:
            client = self._usable()  # checked after the wait: it may have died meanwhile
            return await self._request(
                lambda: client.call_tool(
                    remote_name, arguments, read_timeout_seconds=self.settings.call_timeout
                ),
                replay,
                f"the call to {remote_name}",
            )

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """Read one resource (an inspection: a lost answer is a transient error)."""
        async with self._limiter:
            client = self._usable()
            return await self._request(
                lambda: client.read_resource(uri, cache_mode="bypass"),
                Replay.SAFE,
                f"reading {uri}",
            )

    async def _request(self, request: Callable[[], Awaitable[R]], replay: Replay, what: str) -> R:
        try:
            return await self._while_connected(request)
        except MCPError as exc:
            raise self._failure(exc, replay, what) from exc
        except TimeoutError as exc:
            raise self._after_send_failure(
                f"gave no answer within {self.settings.call_timeout:g}s", replay, what
            ) from exc
        except _ConnectionEnded as exc:
            self._lost = self._lost or "its connection ended"
            raise self._after_send_failure(
                f"the connection ended ({self._lost})", replay, what
            ) from exc
        except Exception as exc:  # transport or protocol failure after the request left
            raise self._transport_failure(exc, replay, what) from exc

    def _failure(self, exc: MCPError, replay: Replay, what: str) -> Exception:
        kind = failure_kind(exc.code, exc.data)
        if kind == NOT_SENT:
            # HTTP: each request opens its own exchange, so the server may be back
            # for the next call; nothing is remembered as lost.
            return self._unavailable(exc.message)
        if kind == LOST:
            return self._after_send_failure(exc.message, replay, what)
        if exc.code == CONNECTION_CLOSED:
            self._lost = "its connection closed"
            return self._after_send_failure("the connection closed", replay, what)
        if exc.code == REQUEST_TIMEOUT:
            return self._after_send_failure(
                f"gave no answer within {self.settings.call_timeout:g}s", replay, what
            )
        # The server answered: it refused the request (unknown tool, bad params, ...).
        return ToolError(
            f"the MCP server {self.name!r} refused {what}: {exc.message} (code {exc.code})"
        )

    def _transport_failure(self, exc: Exception, replay: Replay, what: str) -> Exception:
        cause = _flatten(exc)
        detail = f"{type(cause).__name__}: {cause}"
        if isinstance(cause, OSError | anyio.BrokenResourceError | anyio.ClosedResourceError):
            self._lost = f"its transport failed ({detail})"
        return self._after_send_failure(f"the exchange failed ({detail})", replay, what)

    def close(self) -> None:
        """End the connection's task and forget the client (the task exits it)."""
        self._closing.set()
        self._client = None
        self._lost = self._lost or "it was disconnected"

    def release(self) -> None:
        """Drop the captured stderr, once the connection's task has ended."""
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


class McpServers:
    """The connected MCP servers of one configuration, and their Zuno tools."""

    def __init__(
        self,
        connections: Sequence[McpConnection],
        limiter: anyio.CapacityLimiter,
        failures: dict[str, McpServerError] | None = None,
    ) -> None:
        self.connections = list(connections)
        self.limiter = limiter
        """Bounds the requests in flight to all these servers (``concurrency.mcp_connections``)."""
        self.failures: dict[str, McpServerError] = dict(failures or {})
        """The servers left out because they could not start, by name (``skip_failed``)."""

    def tools(self) -> list[Tool[Any]]:
        """Fresh Zuno tools for every connected server, in configuration order."""
        from zuno.integrations.mcp.remote import remote_tools

        return [tool for connection in self.connections for tool in remote_tools(connection)]

    def get(self, name: str) -> McpConnection | None:
        """The connection of the named server."""
        return next((c for c in self.connections if c.name == name), None)


@asynccontextmanager
async def connect_mcp_servers(
    config: Config,
    workspace: Path,
    *,
    only: Sequence[str] | None = None,
    skip_failed: bool = False,
    protected: Sequence[Path] | None = None,
) -> AsyncGenerator[McpServers]:
    """Connect the enabled servers of ``config.mcp`` (or just ``only``) for the block.

    Args:
        config: The configuration naming the servers.
        workspace: Where stdio servers start (unless their ``cwd`` says otherwise).
        only: Connect just these servers (disabled ones included).
        skip_failed: Leave out a server that cannot start, keeping its error in
            :attr:`McpServers.failures`, instead of raising.
        protected: Zuno's own folders, read-only for confined servers (found
            now when None; see :mod:`zuno.policy.control_paths`).

    Raises:
        McpServerError: a server could not be started, connected or listed
            (not with ``skip_failed``).
    """
    limiter = anyio.CapacityLimiter(config.concurrency.mcp_connections)
    root = await anyio.Path(workspace).resolve()
    if protected is None:
        protected = control_paths().named
    connections: list[McpConnection] = []
    failed: list[McpConnection] = []
    failures: dict[str, McpServerError] = {}
    # Errors leave through the task group's wall untouched (it would wrap them in
    # a group): a startup error, or whatever the block itself raised.
    failure: Exception | None = None
    try:
        async with anyio.create_task_group() as tg:
            try:
                for name, settings in config.mcp.servers.items():
                    if (only is not None and name not in only) or (
                        only is None and not settings.enabled
                    ):
                        continue
                    connection = McpConnection(
                        name, settings, Path(root), limiter, config.sandbox, protected
                    )
                    try:
                        await connection.connect(tg)
                    except McpServerError as exc:
                        if not skip_failed:
                            connections.append(connection)
                            raise
                        failed.append(connection)
                        failures[name] = exc
                        continue
                    connections.append(connection)
                try:
                    yield McpServers(connections, limiter, failures)
                except Exception as exc:
                    failure = exc
            except McpServerError as exc:
                failure = exc
            finally:
                for connection in connections:
                    connection.close()
    finally:
        for connection in [*connections, *failed]:
            connection.release()
    if failure is not None:
        raise failure
