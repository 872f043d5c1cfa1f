"""A language-server client: JSON-RPC over a server's stdin and stdout.

One :class:`LspClient` owns one server process. It starts it in a new process
group, performs ``initialize``/``initialized``, opens files on demand (and
sends the full text again, with a new version, when a file changed on disk),
sends requests with ids and deadlines, collects ``publishDiagnostics``, and on
close sends ``shutdown``/``exit`` before making sure the process is gone.

There is no background reader task: a client outlives the task (and even the
event loop) that started it, so nothing may be left running between calls.
Instead, whichever waiting caller finds no one reading becomes the reader: it
reads the pipe and hands every response to its waiter, until its own answer
arrives; then the next waiter takes over. Reading is resumable at any chunk
boundary (see :class:`~zuno.lsp.framing.FrameDecoder`), so a reader that is
cancelled or times out loses nothing. The pipes are non-blocking descriptors
waited on with :func:`anyio.wait_readable`, which also keeps the client usable
from a later event loop.

Errors::

    LspError
      ServerUnavailable   the server could not be started or did not initialize
      ServerExited        the server died or broke the protocol; the client is unusable
      RequestTimeout      no answer within the deadline (the request was cancelled)
      ResponseError       the server answered with a JSON-RPC error
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import tempfile
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.to_thread

from zuno.lsp.documents import OpenDocument, path_to_uri, read_source, uri_to_path
from zuno.lsp.framing import FrameDecoder, FramingError, encode_message, json_array, json_object
from zuno.lsp.settings import LspServerSettings
from zuno.lsp.watch import CHANGED, WorkspaceScan

__all__ = [
    "CLIENT_CAPABILITIES",
    "LspClient",
    "LspError",
    "RequestTimeout",
    "ResponseError",
    "ServerExited",
    "ServerUnavailable",
]

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

_CHUNK = 256 * 1024
_PIPE_SIZE = 1024 * 1024
_F_SETPIPE_SZ = 1031
_WRITE_TIMEOUT = 10.0
"""A server that reads none of a message for this long is treated as hung."""
_SHUTDOWN_TIMEOUT = 5.0
_STDERR_TAIL = 2000
_RELIST_WAIT = 5.0
"""After files were created or deleted, how long to wait for the server's ready message."""
_FRESH_DIAGNOSTICS_WAIT = 3.0
"""After other files changed, how long to wait for an open file's diagnostics to be redone
(a server republishes only the files the change affects; the others keep theirs)."""
_METHOD_NOT_FOUND = -32601


class LspError(Exception):
    """Base of the language-server client's errors."""


class ServerUnavailable(LspError):
    """The server could not be started, or did not complete ``initialize``."""


class ServerExited(LspError):
    """The server died or broke the protocol; this client cannot be used again."""


class RequestTimeout(LspError):
    """A request got no answer within its deadline; it was cancelled."""


class ResponseError(LspError):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, method: str, code: int, message: str) -> None:
        super().__init__(f"{method} failed: {message} (code {code})")
        self.method = method
        self.code = code
        self.message = message


@dataclass(slots=True)
class _Pending:
    done: bool = False
    result: Any = None
    error: dict[str, Any] | None = None


@dataclass(slots=True)
class _Published:
    version: int | None
    serial: int
    diagnostics: list[dict[str, Any]] = field(default_factory=lambda: [])


def _kill_group(pid: int) -> None:
    """Kill the process group ``pid`` leads (the server and anything it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _notify_closing(fd: int) -> None:
    """Wake a task waiting on ``fd`` before it is closed (it gets ClosedResourceError)."""
    # Outside an event loop (an atexit kill) no task can be waiting, and anyio
    # refuses the call; any failure here only means there was no one to wake.
    with contextlib.suppress(Exception):
        anyio.notify_closing(fd)


class LspClient:
    """One running language server for one workspace."""

    def __init__(
        self,
        argv: Sequence[str],
        workspace: Path,
        server: LspServerSettings,
        extensions: Iterable[str] = (),
    ) -> None:
        """A client of the server ``argv`` for ``workspace``, not started yet.

        ``extensions`` are the file types it serves: changes to such files on
        disk are reported to it (see :mod:`zuno.lsp.watch`).
        """
        self.argv = tuple(argv)
        self.workspace = workspace
        self.server = server
        self.capabilities: dict[str, Any] = {}
        """What the server said it can do, from ``initialize``."""
        self.server_name = self.argv[0]
        self._proc: subprocess.Popen[bytes] | None = None
        self._stdin = -1
        self._stdout = -1
        self._stderr: IO[bytes] | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._decoder = FrameDecoder()
        self._next_id = 0
        self._pending: dict[int, _Pending] = {}
        self._reading = False
        self._waiters: set[anyio.Event] = set()
        self._write_lock = anyio.Lock()
        self._sync_lock = anyio.Lock()
        self._documents: dict[str, OpenDocument] = {}
        self._diagnostics: dict[str, _Published] = {}
        self._published = 0
        self._failure: str | None = None
        self._files = WorkspaceScan(workspace, extensions)
        self._ready_pattern = re.compile(server.ready_message) if server.ready_message else None
        self._ready = self._ready_pattern is None

    # Lifetime -------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """Whether the server runs and the client can still talk to it."""
        return self._failure is None and self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id (it leads its own process group)."""
        return self._proc.pid if self._proc is not None else None

    async def start(self, *, timeout: float) -> None:  # noqa: ASYNC109 - the handshake's deadline
        """Start the server and complete ``initialize``/``initialized`` within ``timeout``.

        When the server has a ``ready_message``, also wait for it, within the same
        deadline; a server that never says it is ready is used anyway.
        """
        deadline = anyio.current_time() + timeout
        await anyio.to_thread.run_sync(self._files.changes)  # the baseline
        self._spawn()
        try:
            with anyio.fail_after(timeout):
                result = await self._call("initialize", self._initialize_params())
        except TimeoutError:
            self.kill()
            raise ServerUnavailable(
                f"{self._describe()} did not answer initialize within {timeout:g}s"
                + self._stderr_note()
            ) from None
        except LspError as exc:
            self.kill()
            raise ServerUnavailable(
                f"{self._describe()} failed to start: {exc}" + self._stderr_note()
            ) from None
        answer = json_object(result)
        self.capabilities = json_object(answer.get("capabilities"))
        name = json_object(answer.get("serverInfo")).get("name")
        if isinstance(name, str) and name:
            self.server_name = name
        await self.notify("initialized", {})
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            # Reading meanwhile also answers the server's configuration requests.
            await self._wait_until(lambda: self._ready)

    def _spawn(self) -> None:
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by kill()
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                cwd=self.workspace,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            self._stderr.close()
            raise ServerUnavailable(
                f"{self._describe()} could not be started: {exc.strerror or exc}"
            ) from None
        assert proc.stdin is not None and proc.stdout is not None
        self._proc = proc
        # Killed with Zuno: at interpreter exit, or when this client is dropped.
        self._finalizer = weakref.finalize(self, _kill_group, proc.pid)
        self._stdin = proc.stdin.fileno()
        self._stdout = proc.stdout.fileno()
        for fd in (self._stdin, self._stdout):
            os.set_blocking(fd, False)
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)

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
        if self._proc is None:
            return
        if self.alive:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(LspError):
                    await self.request("shutdown", None, timeout=_SHUTDOWN_TIMEOUT)
                    await self.notify("exit", None)
                # The server closing its output is the sign that it exited.
                with anyio.move_on_after(_SHUTDOWN_TIMEOUT), contextlib.suppress(LspError):
                    await self._wait_until(lambda: False)
        self.kill()

    def kill(self) -> None:
        """Kill the server's process group now and release the pipes (idempotent)."""
        proc = self._proc
        if self._failure is None:
            self._failure = "the client was closed"
        if proc is None:
            return
        if self._finalizer is not None and self._finalizer.alive:
            self._finalizer()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None and not stream.closed:
                _notify_closing(stream.fileno())
                with contextlib.suppress(OSError):
                    stream.close()
        if self._stderr is not None:
            self._stderr.close()
        self._wake()

    def _describe(self) -> str:
        return f"language server `{' '.join(self.argv)}`"

    def stderr_tail(self) -> str:
        """The end of what the server wrote to stderr."""
        if self._stderr is None or self._stderr.closed:
            return ""
        try:
            self._stderr.flush()
            size = self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, size - _STDERR_TAIL))
            return self._stderr.read().decode("utf-8", errors="replace").strip()
        except (OSError, ValueError):
            return ""

    def _stderr_note(self) -> str:
        tail = self.stderr_tail()
        return f"; its stderr ends with:\n{tail}" if tail else ""

    def _fail(self, reason: str) -> ServerExited:
        if self._failure is None:
            self._failure = reason
        self._wake()
        return ServerExited(f"{self._describe()} {self._failure}")

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ServerExited(f"{self._describe()} {self._failure}")
        if self._proc is not None and self._proc.poll() is not None:
            raise self._fail(f"exited with code {self._proc.returncode}" + self._stderr_note())

    # Messages -------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any,
        *,
        timeout: float,  # noqa: ASYNC109 - per request, as LSP clients do
    ) -> Any:
        """Send a request and wait for its answer; cancel it if none comes in ``timeout``."""
        try:
            with anyio.fail_after(timeout):
                return await self._call(method, params)
        except TimeoutError:
            raise RequestTimeout(f"{method} got no answer within {timeout:g}s") from None

    async def _call(self, method: str, params: Any) -> Any:
        self._raise_if_failed()
        self._next_id += 1
        request_id = self._next_id
        pending = _Pending()
        self._pending[request_id] = pending
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            await self._write(message)
            await self._wait_until(lambda: pending.done)
        finally:
            self._pending.pop(request_id, None)
            if not pending.done and self.alive:
                # Abandoned (timeout or cancellation): tell the server to stop working on it.
                with anyio.CancelScope(shield=True), contextlib.suppress(LspError):
                    await self.notify("$/cancelRequest", {"id": request_id})
        if pending.error is not None:
            code = pending.error.get("code")
            raise ResponseError(
                method,
                code if isinstance(code, int) else 0,
                str(pending.error.get("message", "unknown error")),
            )
        return pending.result

    async def notify(self, method: str, params: Any) -> None:
        """Send a notification (no answer expected)."""
        self._raise_if_failed()
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._write(message)

    async def _write(self, message: dict[str, Any]) -> None:
        data = memoryview(encode_message(message))
        async with self._write_lock:
            # A frame cut in half would corrupt the stream for every later
            # message, so a started write is finished whatever the caller does.
            with anyio.CancelScope(shield=True):
                try:
                    with anyio.fail_after(_WRITE_TIMEOUT):
                        while data:
                            self._raise_if_failed()
                            try:
                                written = os.write(self._stdin, data)
                            except BlockingIOError:
                                try:
                                    await anyio.wait_writable(self._stdin)
                                except anyio.ClosedResourceError:
                                    raise self._fail("was stopped") from None
                                continue
                            data = data[written:]
                except TimeoutError:
                    error = self._fail(
                        f"read none of its input for {_WRITE_TIMEOUT:g}s and was stopped"
                    )
                    self.kill()
                    raise error from None
                except OSError as exc:  # BrokenPipeError: it exited
                    raise self._fail(f"stopped reading its input ({exc.strerror or exc})") from None

    async def _wait_until(self, ready: Callable[[], bool]) -> None:
        """Wait until ``ready()``, reading the server's output whenever no one else is."""
        while not ready():
            self._raise_if_failed()
            if self._reading:
                event = anyio.Event()
                self._waiters.add(event)
                try:
                    await event.wait()
                finally:
                    self._waiters.discard(event)
                continue
            self._reading = True
            try:
                while not ready():
                    await self._read_chunk()
            finally:
                self._reading = False
                self._wake()

    def _wake(self) -> None:
        for event in self._waiters:
            event.set()

    async def _read_chunk(self) -> None:
        try:
            await anyio.wait_readable(self._stdout)
        except anyio.ClosedResourceError:
            raise self._fail("was stopped") from None
        try:
            data = os.read(self._stdout, _CHUNK)
        except BlockingIOError:
            return
        except OSError as exc:
            raise self._fail(f"output could not be read ({exc.strerror or exc})") from None
        if not data:
            code = self._proc.wait() if self._proc is not None else None
            raise self._fail(f"exited (code {code})" + self._stderr_note())
        try:
            messages = self._decoder.feed(data)
        except FramingError as exc:
            error = self._fail(f"broke the protocol: {exc}")
            self.kill()
            raise error from None
        replies = [reply for m in messages if (reply := self._handle(m)) is not None]
        if messages:
            self._wake()
        if replies:
            # The server may wait on these answers; they are sent whatever happens to us.
            with anyio.CancelScope(shield=True):
                for reply in replies:
                    await self._write(reply)

    def _handle(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """Take one message in; return the answer to send when it is a request to us."""
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                return self._answer(message["id"], method, message.get("params"))
            if method == "textDocument/publishDiagnostics":
                self._take_diagnostics(message.get("params"))
            elif method == "window/logMessage" and self._ready_pattern is not None:
                text = json_object(message.get("params")).get("message")
                if isinstance(text, str) and self._ready_pattern.search(text):
                    self._ready = True
            return None
        request_id = message.get("id")
        pending = self._pending.get(request_id) if isinstance(request_id, int) else None
        if pending is not None:
            error = message.get("error")
            pending.error = json_object(error) if error is not None else None
            pending.result = message.get("result")
            pending.done = True
        return None

    def _answer(self, request_id: Any, method: str, params: Any) -> dict[str, Any]:
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if method == "workspace/configuration":
            items = json_array(json_object(params).get("items"))
            reply["result"] = [self._setting(item) for item in items]
        elif method == "workspace/workspaceFolders":
            uri = path_to_uri(self.workspace)
            reply["result"] = [{"uri": uri, "name": self.workspace.name or "workspace"}]
        elif method in (
            "client/registerCapability",
            "client/unregisterCapability",
            "window/workDoneProgress/create",
            "window/showMessageRequest",
            "window/showDocument",
        ):
            reply["result"] = None
        else:
            reply["error"] = {"code": _METHOD_NOT_FOUND, "message": f"{method} is not supported"}
        return reply

    def _setting(self, item: Any) -> Any:
        section = json_object(item).get("section")
        value: Any = self.server.settings
        if not isinstance(section, str) or not section:
            return value or None
        for part in section.split("."):
            scope = json_object(value)
            if part not in scope:
                return None
            value = scope[part]
        return value

    def _take_diagnostics(self, params: Any) -> None:
        fields = json_object(params)
        uri, version = fields.get("uri"), fields.get("version")
        if not isinstance(uri, str):
            return
        self._published += 1
        self._diagnostics[uri] = _Published(
            version if isinstance(version, int) else None,
            self._published,
            [json_object(d) for d in json_array(fields.get("diagnostics"))],
        )

    # Documents ------------------------------------------------------------------

    async def open_document(self, path: Path, language_id: str) -> OpenDocument:
        """Make the server see ``path`` as it is on disk now (``didOpen`` or ``didChange``).

        Raises OSError when the file cannot be read.
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
                    self._diagnostics.pop(uri, None)
                    await self.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    async def _report(self, changes: list[tuple[Path, int]]) -> None:
        events = [{"uri": path_to_uri(p), "type": kind} for p, kind in changes]
        for doc in self._documents.values():
            doc.others_changed_at = self._published
        relisted = self._ready_pattern is not None and any(k != CHANGED for _, k in changes)
        if relisted:
            self._ready = False
        await self.notify("workspace/didChangeWatchedFiles", {"changes": events})
        if relisted:
            # The server lists the workspace's files again; questions asked before it
            # is done would miss the new files.
            with anyio.move_on_after(_RELIST_WAIT):
                await self._wait_until(lambda: self._ready)

    async def _sync(self, path: Path, language_id: str, uri: str | None = None) -> OpenDocument:
        uri = uri or path_to_uri(path)
        st = await anyio.to_thread.run_sync(path.stat)
        stamp = (st.st_mtime_ns, st.st_size)
        doc = self._documents.get(uri)
        if doc is not None and doc.stamp == stamp:
            return doc
        text = await anyio.to_thread.run_sync(read_source, path)
        if doc is None:
            doc = OpenDocument(uri, language_id, 1, text, stamp, self._published)
            item = {"uri": uri, "languageId": language_id, "version": 1, "text": text}
            await self.notify("textDocument/didOpen", {"textDocument": item})
            self._documents[uri] = doc
            return doc
        doc.stamp = stamp
        if text != doc.text:
            doc.version += 1
            doc.text = text
            doc.published_before = self._published
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
        """The diagnostics the server published for the current version of ``doc``."""

        def ready() -> bool:
            entry = self._diagnostics.get(doc.uri)
            if entry is None:
                return False
            if entry.version is not None:
                return entry.version >= doc.version
            return entry.serial > doc.published_before

        def fresh() -> bool:
            changed_at = doc.others_changed_at
            return changed_at is None or self._diagnostics[doc.uri].serial > changed_at

        try:
            with anyio.fail_after(timeout):
                await self._wait_until(ready)
        except TimeoutError:
            raise RequestTimeout(
                f"no diagnostics were published for {doc.uri} within {timeout:g}s"
            ) from None
        with anyio.move_on_after(min(timeout, _FRESH_DIAGNOSTICS_WAIT)):
            await self._wait_until(fresh)
        doc.others_changed_at = None
        return list(self._diagnostics[doc.uri].diagnostics)

    def supports(self, capability: str) -> bool:
        """Whether the server announced ``capability`` (``referencesProvider``)."""
        value = self.capabilities.get(capability)
        return value is not None and value is not False
