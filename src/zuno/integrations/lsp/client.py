"""A language-server session: the handshake, opened documents, questions, shutdown.

One :class:`LspClient` is one session with one server process (see
:mod:`zuno.integrations.lsp.connection` for the process and the message stream). It
performs ``initialize``/``initialized``, opens files on demand (and sends the
full text again, with a new version, when a file changed on disk), reports
other files changed on disk, sends requests with deadlines, waits for
diagnostics of the current text, and on close sends ``shutdown``/``exit``
before making sure the process is gone. Its errors are drawn in
:mod:`zuno.integrations.lsp.errors`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from zuno.config.lsp import LspServerSettings
from zuno.config.sandbox import SandboxSettings
from zuno.execution.server_launch import Launch, confined, server_launch
from zuno.integrations.lsp.connection import ServerConnection
from zuno.integrations.lsp.documents import OpenDocument, path_to_uri, read_source, uri_to_path
from zuno.integrations.lsp.errors import LspError, RequestTimeout, ServerUnavailable
from zuno.integrations.lsp.framing import json_object
from zuno.integrations.lsp.inbound import InboundMessages
from zuno.integrations.lsp.watch import CHANGED, WorkspaceScan

__all__ = ["CLIENT_CAPABILITIES", "LspClient"]

CLIENT_CAPABILITIES: dict[str, Any] = {
    "general": {"positionEncodings": ["utf-16"]},
    "workspace": {
        "configuration": True,
        "workspaceFolders": True,
        "symbol": {},
        "didChangeWatchedFiles": {"dynamicRegistration": True},
    },
    "textDocument": {
        "synchronization": {"didSave": False, "dynamicRegistration": False},
        "hover": {"contentFormat": ["markdown", "plaintext"]},
        "definition": {"linkSupport": True},
        "references": {},
        "documentSymbol": {"hierarchicalDocumentSymbolSupport": True},
        "publishDiagnostics": {"versionSupport": True, "relatedInformation": False},
    },
    "window": {"workDoneProgress": False},
}
"""What this client tells servers it understands."""

_SHUTDOWN_TIMEOUT = 5.0
_RELIST_WAIT = 5.0
"""After files were created or deleted, how long to wait for the server's ready message."""
_FRESH_DIAGNOSTICS_WAIT = 3.0
"""After other files changed, how long to wait for an open file's diagnostics to be redone
(a server republishes only the files the change affects; the others keep theirs)."""


class LspClient:
    """One running language server for one workspace."""

    def __init__(
        self,
        argv: Sequence[str],
        workspace: Path,
        server: LspServerSettings,
        extensions: Iterable[str] = (),
        sandbox: SandboxSettings | None = None,
        protected: Sequence[Path] = (),
    ) -> None:
        """A client of the server ``argv`` for ``workspace``, not started yet.

        Args:
            argv: The server's command line.
            workspace: The workspace root (the server starts in a folder of
                Zuno's own unless the trusted workspace file configured it).
            server: The server's settings (initialization options, settings, ready message).
            extensions: The file types it serves: changes to such files on disk
                are reported to it (see :mod:`zuno.integrations.lsp.watch`).
            sandbox: The sandbox it runs under unless the user's own file
                says ``"sandbox": false`` (default settings when None).
            protected: Zuno's own folders, read-only for it.
        """
        self.workspace = workspace
        self.server = server
        self.capabilities: dict[str, Any] = {}
        """What the server said it can do, from ``initialize``."""
        # The inbound handler is shared, never a back-reference: see InboundHandler.
        self._inbound = InboundMessages(workspace, server)
        # Started in a folder of Zuno's own unless the trusted workspace file set it
        # (see zuno.execution.server_launch); the workspace reaches it as its root URI.
        launch = server_launch(
            list(argv), workspace, os.environ, from_workspace=server.from_workspace
        )
        wrap = None
        if server.sandbox or server.from_workspace:
            wrap = _confined_argv(
                launch, sandbox or SandboxSettings(), workspace, server.network, protected
            )
        self._connection = ServerConnection(
            launch.argv, launch.cwd, self._inbound, env=launch.env, wrap=wrap
        )
        self.server_name = self._connection.argv[0]
        self._sync_lock = anyio.Lock()
        self._documents: dict[str, OpenDocument] = {}
        self._files = WorkspaceScan(workspace, extensions)

    # Lifetime -------------------------------------------------------------------

    @property
    def argv(self) -> tuple[str, ...]:
        """The server's command line."""
        return self._connection.argv

    @property
    def alive(self) -> bool:
        """Whether the server runs and the client can still talk to it."""
        return self._connection.alive

    @property
    def pid(self) -> int | None:
        """The server's process id (it leads its own process group)."""
        return self._connection.pid

    async def start(self, *, timeout: float) -> None:  # noqa: ASYNC109 - the handshake's deadline
        """Start the server and complete ``initialize``/``initialized`` within ``timeout``.

        When the server has a ``ready_message``, also wait for it, within the same
        deadline; a server that never says it is ready is used anyway.

        Raises:
            ServerUnavailable: the server could not be started or did not initialize.
        """
        connection = self._connection
        deadline = anyio.current_time() + timeout
        await anyio.to_thread.run_sync(self._files.changes)  # the baseline
        connection.spawn()
        try:
            with anyio.fail_after(timeout):
                result = await connection.call("initialize", self._initialize_params())
        except TimeoutError:
            self.kill()
            raise ServerUnavailable(
                f"{connection.description} did not answer initialize within {timeout:g}s"
                + connection.stderr_note()
            ) from None
        except LspError as exc:
            self.kill()
            raise ServerUnavailable(
                f"{connection.description} failed to start: {exc}" + connection.stderr_note()
            ) from None
        answer = json_object(result)
        self.capabilities = json_object(answer.get("capabilities"))
        name = json_object(answer.get("serverInfo")).get("name")
        if isinstance(name, str) and name:
            self.server_name = name
        await self.notify("initialized", {})
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            # Reading meanwhile also answers the server's configuration requests.
            await connection.wait_until(lambda: self._inbound.ready)

    def _initialize_params(self) -> dict[str, Any]:
        root = path_to_uri(self.workspace)
        params: dict[str, Any] = {
            "processId": os.getpid(),
            "clientInfo": {"name": "zuno"},
            "rootUri": root,
            "rootPath": str(self.workspace),
            "workspaceFolders": [{"uri": root, "name": self.workspace.name or "workspace"}],
            "capabilities": CLIENT_CAPABILITIES,
        }
        if self.server.initialization_options is not None:
            params["initializationOptions"] = self.server.initialization_options
        return params

    async def aclose(self) -> None:
        """Send ``shutdown`` and ``exit``, wait briefly for the exit, then kill what remains."""
        connection = self._connection
        if not connection.started:
            return
        if connection.alive:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(LspError):
                    await connection.request("shutdown", None, timeout=_SHUTDOWN_TIMEOUT)
                    await connection.notify("exit", None)
                # The server closing its output is the sign that it exited.
                with anyio.move_on_after(_SHUTDOWN_TIMEOUT), contextlib.suppress(LspError):
                    await connection.wait_until(lambda: False)
        self.kill()

    def kill(self) -> None:
        """Kill the server's process group now and release the pipes (idempotent)."""
        self._connection.kill()

    def stderr_tail(self) -> str:
        """The end of what the server wrote to stderr."""
        return self._connection.stderr_tail()

    def supports(self, capability: str) -> bool:
        """Whether the server announced ``capability`` (``referencesProvider``)."""
        value = self.capabilities.get(capability)
        return value is not None and value is not False

    # Messages -------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any,
        *,
        timeout: float,  # noqa: ASYNC109 - per request, as LSP clients do
    ) -> Any:
        """Send a request and wait for its answer (see :meth:`ServerConnection.request`)."""
        return await self._connection.request(method, params, timeout=timeout)

    async def notify(self, method: str, params: Any) -> None:
        """Send a notification (no answer expected).

        Raises:
            ServerExited: the server died or stopped reading.
        """
        await self._connection.notify(method, params)

    # Documents ------------------------------------------------------------------

    async def open_document(self, path: Path, language_id: str) -> OpenDocument:
        """Make the server see ``path`` as it is on disk now (``didOpen`` or ``didChange``).

        Raises:
            OSError: the file cannot be read.
        """
        async with self._sync_lock:
            return await self._sync(path, language_id)

    async def refresh_documents(self) -> None:
        """Report files changed on disk: new text of opened ones, watched-file events of all.

        Opened files that were deleted are closed.
        """
        async with self._sync_lock:
            changes = await anyio.to_thread.run_sync(self._files.changes)
            if changes:
                await self._report(changes)
            for uri, doc in list(self._documents.items()):
                path = uri_to_path(uri)
                try:
                    if path is None:
                        raise FileNotFoundError(uri)
                    await self._sync(path, doc.language_id, uri)
                except OSError:
                    del self._documents[uri]
                    self._inbound.diagnostics.forget(uri)
                    await self.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    async def _report(self, changes: list[tuple[Path, int]]) -> None:
        events = [{"uri": path_to_uri(p), "type": kind} for p, kind in changes]
        for doc in self._documents.values():
            doc.others_changed_at = self._inbound.diagnostics.serial
        relisted = self._inbound.has_ready_message and any(k != CHANGED for _, k in changes)
        if relisted:
            self._inbound.ready = False
        await self.notify("workspace/didChangeWatchedFiles", {"changes": events})
        if relisted:
            # The server lists the workspace's files again; questions asked before it
            # is done would miss the new files.
            with anyio.move_on_after(_RELIST_WAIT):
                await self._connection.wait_until(lambda: self._inbound.ready)

    async def _sync(self, path: Path, language_id: str, uri: str | None = None) -> OpenDocument:
        uri = uri or path_to_uri(path)
        st = await anyio.to_thread.run_sync(path.stat)
        stamp = (st.st_mtime_ns, st.st_size)
        doc = self._documents.get(uri)
        if doc is not None and doc.stamp == stamp:
            return doc
        text = await anyio.to_thread.run_sync(read_source, path)
        published = self._inbound.diagnostics.serial
        if doc is None:
            doc = OpenDocument(uri, language_id, 1, text, stamp, published)
            item = {"uri": uri, "languageId": language_id, "version": 1, "text": text}
            await self.notify("textDocument/didOpen", {"textDocument": item})
            self._documents[uri] = doc
            return doc
        doc.stamp = stamp
        if text != doc.text:
            doc.version += 1
            doc.text = text
            doc.published_before = published
            await self.notify(
                "textDocument/didChange",
                {
                    "textDocument": {"uri": uri, "version": doc.version},
                    "contentChanges": [{"text": text}],
                },
            )
        return doc

    async def diagnostics(
        self,
        doc: OpenDocument,
        *,
        timeout: float,  # noqa: ASYNC109 - the wait for a notification
    ) -> list[dict[str, Any]]:
        """The diagnostics the server published for the current version of ``doc``.

        Raises:
            RequestTimeout: none were published for it within ``timeout``.
            ServerExited: the server died or broke the protocol.
        """
        published = self._inbound.diagnostics
        try:
            with anyio.fail_after(timeout):
                await self._connection.wait_until(lambda: published.covers(doc))
        except TimeoutError:
            raise RequestTimeout(
                f"no diagnostics were published for {doc.uri} within {timeout:g}s"
            ) from None
        with anyio.move_on_after(min(timeout, _FRESH_DIAGNOSTICS_WAIT)):
            await self._connection.wait_until(lambda: published.redone_after_others_changed(doc))
        doc.others_changed_at = None
        return published.of(doc.uri)


@contextlib.contextmanager
def _confined_argv(
    launch: Launch,
    sandbox: SandboxSettings,
    workspace: Path,
    network: bool,
    protected: Sequence[Path],
) -> Generator[list[str]]:
    """The server's argv inside the sandbox, for as long as it runs."""
    with confined(
        launch, sandbox, workspace=workspace, network=network, protected=protected
    ) as wrapped:
        yield wrapped.argv
