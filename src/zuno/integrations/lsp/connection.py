"""One language-server process and the JSON-RPC spoken over its stdin and stdout.

A :class:`ServerConnection` starts the server in a new process group, sends
requests with ids (and deadlines) and notifications, matches responses to
their requests, hands what the server sends unasked to an
:class:`InboundHandler`, and kills the process group when closed, dropped, or
at interpreter exit. What the messages mean is the session's business (see
:mod:`zuno.integrations.lsp.client`).

There is no background reader task: a connection outlives the task (and even
the event loop) that started it, so nothing may be left running between calls.
Instead, whichever waiting caller finds no one reading becomes the reader: it
reads the pipe and hands every response to its waiter, until its own answer
arrives; then the next waiter takes over. Reading is resumable at any chunk
boundary (see :class:`~zuno.integrations.lsp.framing.FrameDecoder`), so a reader that is
cancelled or times out loses nothing. The pipes are non-blocking descriptors
waited on with :func:`anyio.wait_readable`, which also keeps the connection
usable from a later event loop.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import anyio

from zuno.integrations.lsp.errors import (
    LspError,
    RequestTimeout,
    ResponseError,
    ServerExited,
    ServerUnavailable,
)
from zuno.integrations.lsp.framing import FrameDecoder, FramingError, encode_message, json_object

__all__ = ["InboundHandler", "MethodNotFound", "ServerConnection"]

_CHUNK = 256 * 1024
_PIPE_SIZE = 1024 * 1024
_F_SETPIPE_SZ = 1031
_WRITE_TIMEOUT = 10.0
"""A server that reads none of a message for this long is treated as hung."""
_STDERR_TAIL = 2000
_METHOD_NOT_FOUND = -32601


class MethodNotFound(Exception):
    """Raised by :meth:`InboundHandler.answer` for a request it does not serve."""


class InboundHandler(Protocol):
    """What a connection does with the messages the server sends unasked.

    It must not refer back to the connection (nor to its owner): the
    connection's finalizer kills the server when the connection is dropped,
    and a reference cycle would delay that until a garbage collection.
    """

    def answer(self, method: str, params: Any) -> Any:
        """The result of the server's request ``method``.

        Raises:
            MethodNotFound: the request is not one this client serves.
        """
        ...

    def notice(self, method: str, params: Any) -> None:
        """Take in the server's notification ``method``."""
        ...


@dataclass(slots=True)
class _Pending:
    done: bool = False
    result: Any = None
    error: dict[str, Any] | None = None


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


class ServerConnection:
    """The process of one language server and the message stream to and from it."""

    def __init__(
        self,
        argv: Sequence[str],
        cwd: Path,
        inbound: InboundHandler,
        env: Mapping[str, str] | None = None,
        wrap: AbstractContextManager[Sequence[str]] | None = None,
    ) -> None:
        """A connection to the server ``argv``, run in ``cwd``; not started yet.

        Args:
            argv: The server's command line.
            cwd: The directory the server runs in.
            inbound: Answers the server's requests and takes its notifications.
            env: Its environment (None: Zuno's own).
            wrap: Entered at spawn and left at kill: the argv that actually
                starts (the server inside a sandbox; see
                :func:`zuno.execution.server_launch.confined`).
        """
        self.argv = tuple(argv)
        self.cwd = cwd
        self.env = None if env is None else dict(env)
        self._wrap = wrap
        self._held = contextlib.ExitStack()
        self._inbound = inbound
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
        self._failure: str | None = None

    # Lifetime -------------------------------------------------------------------

    @property
    def description(self) -> str:
        """The server as error messages name it."""
        return f"language server `{' '.join(self.argv)}`"

    @property
    def started(self) -> bool:
        """Whether :meth:`spawn` started the process (it may have ended since)."""
        return self._proc is not None

    @property
    def alive(self) -> bool:
        """Whether the server runs and the connection can still talk to it."""
        return self._failure is None and self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The server's process id (it leads its own process group)."""
        return self._proc.pid if self._proc is not None else None

    def spawn(self) -> None:
        """Start the server process in a new process group.

        Raises:
            ServerUnavailable: the program could not be run.
        """
        argv: Sequence[str] = self.argv
        if self._wrap is not None:
            try:
                argv = self._held.enter_context(self._wrap)
            except Exception as exc:  # the sandbox cannot start: say so, as for a missing program
                raise ServerUnavailable(f"{self.description} could not be started: {exc}") from None
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by kill()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                cwd=self.cwd,
                env=self.env,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            self._stderr.close()
            self._held.close()
            raise ServerUnavailable(
                f"{self.description} could not be started: {exc.strerror or exc}"
            ) from None
        assert proc.stdin is not None and proc.stdout is not None
        self._proc = proc
        # Killed with Zuno: at interpreter exit, or when this connection is dropped.
        self._finalizer = weakref.finalize(self, _kill_group, proc.pid)
        self._stdin = proc.stdin.fileno()
        self._stdout = proc.stdout.fileno()
        for fd in (self._stdin, self._stdout):
            os.set_blocking(fd, False)
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, _F_SETPIPE_SZ, _PIPE_SIZE)

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
        self._held.close()  # the sandbox's private folder and held control files
        self._wake()

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

    def stderr_note(self) -> str:
        """The end of the server's stderr as a note to append to an error message."""
        tail = self.stderr_tail()
        return f"; its stderr ends with:\n{tail}" if tail else ""

    def _fail(self, reason: str) -> ServerExited:
        if self._failure is None:
            self._failure = reason
        self._wake()
        return ServerExited(f"{self.description} {self._failure}")

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ServerExited(f"{self.description} {self._failure}")
        if self._proc is not None and self._proc.poll() is not None:
            raise self._fail(f"exited with code {self._proc.returncode}" + self.stderr_note())

    # Messages -------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: Any,
        *,
        timeout: float,  # noqa: ASYNC109 - per request, as LSP clients do
    ) -> Any:
        """Send a request and wait for its answer; cancel it if none comes in ``timeout``.

        Raises:
            RequestTimeout: no answer came in time.
            ResponseError: the server answered with an error.
            ServerExited: the server died or broke the protocol.
        """
        try:
            with anyio.fail_after(timeout):
                return await self.call(method, params)
        except TimeoutError:
            raise RequestTimeout(f"{method} got no answer within {timeout:g}s") from None

    async def call(self, method: str, params: Any) -> Any:
        """Send a request and wait for its answer, however long it takes.

        A call that is abandoned (cancelled) is cancelled on the server too.

        Raises:
            ResponseError: the server answered with an error.
            ServerExited: the server died or broke the protocol.
        """
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
            await self.wait_until(lambda: pending.done)
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
        """Send a notification (no answer expected).

        Raises:
            ServerExited: the server died or stopped reading.
        """
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

    async def wait_until(self, ready: Callable[[], bool]) -> None:
        """Wait until ``ready()``, reading the server's output whenever no one else is.

        ``ready`` is checked after every batch of messages taken in.

        Raises:
            ServerExited: the server died or broke the protocol first.
        """
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
            raise self._fail(f"exited (code {code})" + self.stderr_note())
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
            self._inbound.notice(method, message.get("params"))
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
        try:
            reply["result"] = self._inbound.answer(method, params)
        except MethodNotFound:
            reply["error"] = {"code": _METHOD_NOT_FOUND, "message": f"{method} is not supported"}
        return reply
