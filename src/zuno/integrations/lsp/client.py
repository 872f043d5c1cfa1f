"""A language-server session: the handshake, opened documents, questions, shutdown.

One :class:`LspClient` is one session with one server process (see
:mod:`zuno.integrations.lsp.connection` for the process and the message stream). It
performs ``initialize``/``initialized``, opens files on demand (and sends the
full text again, with a new version, when a file changed on disk), reports
other files changed on disk, asks questions with deadlines (hover,
definition, references, symbols), waits for diagnostics of the current text,
and on close sends ``shutdown``/``exit`` before making sure the process is
gone. What it sends and reads back are ``lsprotocol`` objects (see
:mod:`zuno.integrations.lsp.protocol`); its errors are drawn in
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
import attrs
from lsprotocol import types

from zuno.config.lsp import LspServerSettings
from zuno.config.sandbox import SandboxSettings
from zuno.execution.server_launch import Launch, confined, server_launch
from zuno.integrations.lsp.connection import ServerConnection
from zuno.integrations.lsp.documents import OpenDocument, path_to_uri, read_source, uri_to_path
from zuno.integrations.lsp.errors import LspError, RequestTimeout, ServerUnavailable
from zuno.integrations.lsp.framing import json_object
from zuno.integrations.lsp.inbound import InboundMessages
from zuno.integrations.lsp.protocol import answer_of, to_json
from zuno.integrations.lsp.watch import CHANGED, WorkspaceScan

__all__ = ["CLIENT_CAPABILITIES", "LspClient"]

CLIENT_CAPABILITIES = types.ClientCapabilities(
    general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
    workspace=types.WorkspaceClientCapabilities(
        configuration=True,
        workspace_folders=True,
        symbol=types.WorkspaceSymbolClientCapabilities(),
        did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(
            dynamic_registration=True
        ),
    ),
    text_document=types.TextDocumentClientCapabilities(
        synchronization=types.TextDocumentSyncClientCapabilities(
            did_save=False, dynamic_registration=False
        ),
        hover=types.HoverClientCapabilities(
            content_format=[types.MarkupKind.Markdown, types.MarkupKind.PlainText]
        ),
        definition=types.DefinitionClientCapabilities(link_support=True),
        references=types.ReferenceClientCapabilities(),
        document_symbol=types.DocumentSymbolClientCapabilities(
            hierarchical_document_symbol_support=True
        ),
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(
            version_support=True, related_information=False
        ),
    ),
    window=types.WindowClientCapabilities(work_done_progress=False),
)
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
        self._confined = wrap is not None
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
                result = await connection.call(types.INITIALIZE, self._initialize_params())
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
        await self.notify(types.INITIALIZED, types.InitializedParams())
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            # Reading meanwhile also answers the server's configuration requests.
            await connection.wait_until(lambda: self._inbound.ready)

    def _initialize_params(self) -> Any:
        root = path_to_uri(self.workspace)
        params = types.InitializeParams(
            # In the sandbox's own process namespace Zuno's pid names no process, and
            # servers that watch their client's pid (pyright) would exit within seconds.
            process_id=None if self._confined else os.getpid(),
            client_info=types.ClientInfo(name="zuno"),
            root_uri=root,
            root_path=str(self.workspace),
            workspace_folders=[
                types.WorkspaceFolder(uri=root, name=self.workspace.name or "workspace")
            ],
            capabilities=CLIENT_CAPABILITIES,
            initialization_options=self.server.initialization_options,
        )
        return to_json(params)

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

    async def notify(self, method: str, params: object) -> None:
        """Send a notification (no answer expected); lsprotocol ``params`` are converted.

        Raises:
            ServerExited: the server died or stopped reading.
        """
        if attrs.has(type(params)):
            params = to_json(params)
        await self._connection.notify(method, params)

    # Questions ------------------------------------------------------------------

    async def hover(
        self,
        uri: str,
        at: tuple[int, int],
        *,
        timeout: float,  # noqa: ASYNC109 - per request
    ) -> types.Hover | None:
        """The hover answer at ``at`` (0-based line, UTF-16 character) of the document ``uri``.

        Raises:
            LspError: as for :meth:`request`; ResponseError when the answer is not valid LSP.
        """
        params = types.HoverParams(text_document=_document(uri), position=_position(at))
        return await self._ask(types.TEXT_DOCUMENT_HOVER, params, timeout)

    async def definition(
        self,
        uri: str,
        at: tuple[int, int],
        *,
        timeout: float,  # noqa: ASYNC109 - per request
    ) -> list[types.Location]:
        """Where the name at ``at`` of ``uri`` is defined (links become their target's name)."""
        params = types.DefinitionParams(text_document=_document(uri), position=_position(at))
        return _locations(await self._ask(types.TEXT_DOCUMENT_DEFINITION, params, timeout))

    async def references(
        self,
        uri: str,
        at: tuple[int, int],
        *,
        timeout: float,  # noqa: ASYNC109 - per request
    ) -> list[types.Location]:
        """Where the name at ``at`` of ``uri`` is used, its declaration included."""
        params = types.ReferenceParams(
            text_document=_document(uri),
            position=_position(at),
            context=types.ReferenceContext(include_declaration=True),
        )
        return _locations(await self._ask(types.TEXT_DOCUMENT_REFERENCES, params, timeout))

    async def document_symbols(
        self,
        uri: str,
        *,
        timeout: float,  # noqa: ASYNC109 - per request
    ) -> Sequence[types.DocumentSymbol] | Sequence[types.SymbolInformation]:
        """The symbols of the document ``uri``: a tree, or a flat list for older servers."""
        params = types.DocumentSymbolParams(text_document=_document(uri))
        return await self._ask(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL, params, timeout) or []

    async def workspace_symbols(
        self,
        query: str,
        *,
        timeout: float,  # noqa: ASYNC109 - per request
    ) -> Sequence[types.SymbolInformation] | Sequence[types.WorkspaceSymbol]:
        """The workspace's symbols whose name matches ``query``."""
        params = types.WorkspaceSymbolParams(query=query)
        return await self._ask(types.WORKSPACE_SYMBOL, params, timeout) or []

    async def _ask(self, method: str, params: object, timeout: float) -> Any:  # noqa: ASYNC109
        result = await self.request(method, to_json(params), timeout=timeout)
        return answer_of(method, result)

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
                    await self.notify(
                        types.TEXT_DOCUMENT_DID_CLOSE,
                        types.DidCloseTextDocumentParams(text_document=_document(uri)),
                    )

    async def _report(self, changes: list[tuple[Path, int]]) -> None:
        events = [
            types.FileEvent(uri=path_to_uri(p), type=types.FileChangeType(k)) for p, k in changes
        ]
        for doc in self._documents.values():
            doc.others_changed_at = self._inbound.diagnostics.serial
        relisted = self._inbound.has_ready_message and any(k != CHANGED for _, k in changes)
        if relisted:
            self._inbound.ready = False
        await self.notify(
            types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            types.DidChangeWatchedFilesParams(changes=events),
        )
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
            item = types.TextDocumentItem(uri=uri, language_id=language_id, version=1, text=text)
            await self.notify(
                types.TEXT_DOCUMENT_DID_OPEN, types.DidOpenTextDocumentParams(text_document=item)
            )
            self._documents[uri] = doc
            return doc
        doc.stamp = stamp
        if text != doc.text:
            doc.version += 1
            doc.text = text
            doc.published_before = published
            await self.notify(
                types.TEXT_DOCUMENT_DID_CHANGE,
                types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(
                        uri=uri, version=doc.version
                    ),
                    content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
                ),
            )
        return doc

    async def diagnostics(
        self,
        doc: OpenDocument,
        *,
        timeout: float,  # noqa: ASYNC109 - the wait for a notification
    ) -> list[types.Diagnostic]:
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


def _document(uri: str) -> types.TextDocumentIdentifier:
    return types.TextDocumentIdentifier(uri=uri)


def _position(at: tuple[int, int]) -> types.Position:
    return types.Position(line=at[0], character=at[1])


def _locations(
    answer: types.Location | Sequence[types.Location] | Sequence[types.LocationLink] | None,
) -> list[types.Location]:
    """A definition or references answer as locations (a link's target names the place)."""
    items = [answer] if isinstance(answer, types.Location) else answer or []
    return [
        types.Location(uri=item.target_uri, range=item.target_selection_range)
        if isinstance(item, types.LocationLink)
        else item
        for item in items
    ]


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
