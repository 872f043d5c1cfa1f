"""The host side of ``proxy`` network mode: one small proxy per call.

A command in ``proxy`` mode runs in a closed network namespace. Before the
command starts, the bridge (:mod:`zuno.execution.sandbox.egress._bridge`, run inside the
sandbox) opens a listening TCP socket on the namespace's loopback and hands it
to Zuno over a UNIX socket pair made for this call alone; Zuno accepts the
command's connections on it. The call a connection belongs to is therefore
known from the socket it arrived on, never from anything the command sends,
and no path exists that another call could connect to.

On each connection the proxy reads one of HTTP CONNECT, a plain HTTP request
with an absolute URL, or SOCKS5 (CONNECT only), checks the host with
:class:`~zuno.config.egress.EgressRules`, resolves it, checks each
address, connects to the first address that passes, and relays bytes both
ways, counting them in an :class:`~zuno.execution.sandbox.egress.ledger.EgressRecord`.

It is written on asyncio streams rather than on a proxy library: the proxies
that exist (proxy.py, mitmproxy) own their listening sockets, processes or
threads and resolve names themselves, while this one must serve a socket that
arrives from inside a namespace, attribute it to one call, and connect only to
the address it checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import mmap
import os
import socket
import struct
import threading
from collections.abc import AsyncGenerator, Callable, Generator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from zuno.config.egress import Decision, EgressRules
from zuno.execution.sandbox.egress.ledger import EgressRecord

__all__ = ["CallProxy", "call_proxy", "hosted_proxy"]


_CHUNK = 4 << 20
_MAX_CONNECTIONS = 256
"""Connections one call may have open at once (each relays in two threads)."""
_HEAD_LIMIT = 64 * 1024
_CONNECT_TIMEOUT = 15.0


class _Refused(Exception):
    """A connection refused or failed; the record says why."""


@dataclass
class CallProxy:
    """The proxy of one call.

    Attributes:
        rules: What the call may reach.
        child_fd: The end of the socket pair the sandboxed bridge inherits.
        records: The ledger, one record per connection attempt, in order.
        finished: The records whose connection has ended, in the order they ended
            (their byte counts are final).
        on_refused: Called with each record refused by a rule, when it is refused
            (a background job writes the reason into its output).
    """

    rules: EgressRules
    child_fd: int
    records: list[EgressRecord] = field(default_factory=lambda: [])
    finished: list[EgressRecord] = field(default_factory=lambda: [])
    on_refused: Callable[[EgressRecord], None] | None = None
    open_sockets: set[socket.socket] = field(default_factory=lambda: set())
    _tasks: set[asyncio.Task[None]] = field(default_factory=lambda: set())
    _own: dict[asyncio.Task[None], EgressRecord] = field(default_factory=lambda: {})

    @property
    def idle(self) -> bool:
        """Whether no connection is open (every record is in :attr:`finished`)."""
        return not self._tasks

    async def _serve(self, parent: socket.socket) -> None:
        """Receive the listening socket from the bridge, then accept on it."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(parent.fileno(), lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            loop.remove_reader(parent.fileno())
        _, fds, _, _ = socket.recv_fds(parent, 16, 1)
        if not fds:
            return
        listener = socket.socket(fileno=fds[0])
        listener.setblocking(False)
        server = await asyncio.start_server(self._track, sock=listener, limit=_HEAD_LIMIT)
        async with server:
            await asyncio.Future[None]()  # until cancelled

    async def _track(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._tasks) >= _MAX_CONNECTIONS:
            writer.close()  # a command opening connections without end gets no more threads
            return
        if task is not None:
            self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass  # a client that hung up or spoke nonsense: its connection just ends
        finally:
            if task is not None:
                self._tasks.discard(task)
                record = self._own.pop(task, None)
                if record is not None:
                    self.finished.append(record)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.readexactly(1)
        if first == b"\x05":
            await self._socks5(reader, writer)
        else:
            await self._http(first, reader, writer)

    async def _open(
        self, record: EgressRecord
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Check record's host, resolve, check and connect; raise _Refused otherwise."""
        self.records.append(record)
        task = asyncio.current_task()
        if task is not None:
            self._own[task] = record
        try:
            return await self._connect(record)
        except _Refused:
            if record.decision == "refused" and self.on_refused is not None:
                self.on_refused(record)
            raise

    async def _connect(
        self, record: EgressRecord
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        decision = self.rules.check_name(record.host, record.port)
        record.rule = decision.rule
        if not decision.allowed:
            record.decision, record.reason = "refused", decision.reason
            raise _Refused(decision.reason)
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(
                record.host.strip("[]"), record.port, type=socket.SOCK_STREAM
            )
        except OSError as exc:
            record.decision, record.reason = "failed", f"cannot resolve {record.host}: {exc}"
            raise _Refused(record.reason) from exc
        first_refusal: Decision | None = None
        for family, _, _, _, sockaddr in infos:
            address = ipaddress.ip_address(sockaddr[0])
            checked = self.rules.check_address(record.host, address, record.port)
            if not checked.allowed:
                first_refusal = first_refusal or checked
                record.address = str(address)
                continue
            record.address = str(address)
            if checked.rule is not None:
                record.rule = f"{decision.rule} + {checked.rule}"
            try:
                # The address checked is the address connected: no second lookup.
                return await asyncio.wait_for(
                    asyncio.open_connection(str(address), record.port, family=family, limit=_CHUNK),
                    _CONNECT_TIMEOUT,
                )
            except (OSError, TimeoutError) as exc:
                record.decision = "failed"
                record.reason = f"cannot connect to {record.host}:{record.port}: {exc}"
        if first_refusal is not None and record.decision != "failed":
            record.decision, record.reason = "refused", first_refusal.reason
            record.rule = first_refusal.rule
        elif record.decision != "failed":
            record.decision, record.reason = "failed", f"{record.host} has no address"
        raise _Refused(record.reason)

    async def _http(
        self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head = first + await reader.readuntil(b"\r\n\r\n")
        request_line, _, rest = head.partition(b"\r\n")
        parts = request_line.decode("latin-1").split(" ")
        if len(parts) != 3:
            await _answer(writer, 400, "a proxy request line is METHOD TARGET VERSION")
            return
        method, target, version = parts
        if method.upper() == "CONNECT":
            host, port = _host_port(target, None)
            record = EgressRecord(host=host, port=port, protocol="connect")
            try:
                up_reader, up_writer = await self._open(record)
            except _Refused as exc:
                await _answer(writer, 403 if record.decision == "refused" else 502, str(exc))
                return
            await _relay(
                self,
                (reader, writer),
                (up_reader, up_writer),
                record,
                to_client=b"HTTP/1.1 200 Connection established\r\n\r\n",
            )
            return
        url = urlsplit(target)
        if url.scheme.lower() != "http" or not url.hostname:
            await _answer(
                writer, 400, "only http:// URLs go through as plain requests; use CONNECT"
            )
            return
        record = EgressRecord(host=url.hostname, port=url.port or 80, protocol="http")
        try:
            up_reader, up_writer = await self._open(record)
        except _Refused as exc:
            await _answer(writer, 403 if record.decision == "refused" else 502, str(exc))
            return
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        headers = [
            line for line in rest.split(b"\r\n") if line and not line.lower().startswith(b"proxy-")
        ]
        upstream_head = b"\r\n".join(
            [f"{method} {path} {version}".encode("latin-1"), *headers, b"", b""]
        )
        record.bytes_up += len(upstream_head)
        await _relay(
            self, (reader, writer), (up_reader, up_writer), record, to_upstream=upstream_head
        )

    async def _socks5(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        count = (await reader.readexactly(1))[0]
        await reader.readexactly(count)
        writer.write(b"\x05\x00")  # no authentication: the socket is the identity
        version, command, _, kind = await reader.readexactly(4)
        if version != 5:
            return
        if kind == 1:
            host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
        elif kind == 4:
            host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
        elif kind == 3:
            size = (await reader.readexactly(1))[0]
            host = (await reader.readexactly(size)).decode("idna")
        else:
            writer.write(b"\x05\x08\x00\x01" + bytes(6))
            return
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        if command != 1:
            writer.write(b"\x05\x07\x00\x01" + bytes(6))  # only CONNECT
            return
        record = EgressRecord(host=host, port=port, protocol="socks5")
        try:
            up_reader, up_writer = await self._open(record)
        except _Refused:
            code = 2 if record.decision == "refused" else 5
            writer.write(bytes([5, code, 0, 1]) + bytes(6))
            await writer.drain()
            return
        await _relay(
            self,
            (reader, writer),
            (up_reader, up_writer),
            record,
            to_client=b"\x05\x00\x00\x01" + bytes(6),
        )


def _host_port(target: str, default: int | None) -> tuple[str, int]:
    if target.startswith("["):
        host, _, rest = target[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = target.rpartition(":")
        if not host:
            host, port = port, ""
    if not port and default is not None:
        return host, default
    if not port.isdigit():
        raise ValueError(f"no port in {target!r}")
    return host, int(port)


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    body = (text + "\n").encode()
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    writer.write(
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(OSError):
        await writer.drain()


def _take_buffered(reader: asyncio.StreamReader) -> bytes:
    """What reader holds already (read from the socket, not yet consumed)."""
    buffer: bytearray = reader._buffer  # pyright: ignore[reportPrivateUsage, reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]
    data = bytes(buffer)  # pyright: ignore[reportUnknownArgumentType]
    buffer.clear()  # pyright: ignore[reportUnknownMemberType]
    return data


def _detach(writer: asyncio.StreamWriter) -> socket.socket:
    """A blocking socket of writer's connection; the transport lets go of its own."""
    raw: Any = writer.get_extra_info("socket")
    sock = socket.socket(fileno=os.dup(raw.fileno()))
    writer.transport.abort()  # closes asyncio's descriptor only: the duplicate lives on
    sock.setblocking(True)
    return sock


def _copy(
    source: socket.socket,
    sink: socket.socket,
    first: bytes,
    buffered: bytes,
    count: Callable[[int], None],
) -> None:
    """Copy source to sink until end of file, then shut sink's sending side.

    ``first`` is sent uncounted (what the proxy itself says), ``buffered`` counted
    (what it had read of the stream already). One ``recv_into`` and one ``sendall``
    per chunk, both outside the interpreter lock: on loopback this costs less
    processor time than ``splice`` through a pipe (whose page-sized pieces make
    the next hop's segments ragged), measured in ``docs/benchmarks.md``. The
    buffer is an anonymous map, so a quiet connection costs no memory until
    data fills it.
    """
    if first or buffered:
        sink.sendall(first + buffered)
        count(len(buffered))
    with mmap.mmap(-1, _CHUNK) as buffer, memoryview(buffer) as view:
        while received := source.recv_into(view):
            sink.sendall(view[:received])
            count(received)
    sink.shutdown(socket.SHUT_WR)


async def _relay(
    proxy: CallProxy,
    sides: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    record: EgressRecord,
    *,
    to_upstream: bytes = b"",
    to_client: bytes = b"",
) -> None:
    """Relay both ways in two threads, counting bytes into record, until both ends close.

    The sockets leave asyncio for blocking ones (with ``TCP_NODELAY``: the relay
    adds no wait of its own to small writes, such as SSH's); the call's end shuts
    them down.
    """
    for _, writer in (sides, upstream):
        transport = writer.transport
        if isinstance(transport, asyncio.ReadTransport):  # a socket's: always
            transport.pause_reading()
    up_data, down_data = _take_buffered(sides[0]), _take_buffered(upstream[0])
    client, server = _detach(sides[1]), _detach(upstream[1])
    for sock in (client, server):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    proxy.open_sockets.update((client, server))
    loop = asyncio.get_running_loop()

    def up(n: int) -> None:
        record.bytes_up += n

    def down(n: int) -> None:
        record.bytes_down += n

    left = [2]
    lock = threading.Lock()

    def run(src: socket.socket, dst: socket.socket, first: bytes, data: bytes, count: Any) -> None:
        try:
            _copy(src, dst, first, data, count)
        except OSError:
            pass
        finally:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:  # closed by the last thread only: no descriptor is reused under the other
                client.close()
                server.close()
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(finished.release)

    finished = asyncio.Semaphore(0)
    for args in (
        (client, server, to_upstream, up_data, up),
        (server, client, to_client, down_data, down),
    ):
        threading.Thread(target=run, args=args, daemon=True, name="zuno-egress").start()
    try:
        await finished.acquire()
        await finished.acquire()
    finally:
        for sock in (client, server):
            proxy.open_sockets.discard(sock)
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the threads, which close


@asynccontextmanager
async def call_proxy(rules: EgressRules) -> AsyncGenerator[CallProxy]:
    """The proxy of one call, serving while the context is open.

    Start the command (passing :attr:`CallProxy.child_fd` to it) inside the
    context; on exit every open connection is closed and the ledger is final.
    """
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    parent.setblocking(False)
    proxy = CallProxy(rules=rules, child_fd=child.fileno())
    serving = asyncio.create_task(proxy._serve(parent))  # pyright: ignore[reportPrivateUsage]
    try:
        yield proxy
    finally:
        child.close()
        serving.cancel()
        for sock in list(proxy.open_sockets):  # wakes the relay threads
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for task in list(proxy._tasks):  # pyright: ignore[reportPrivateUsage]
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await serving
        await asyncio.gather(*proxy._tasks, return_exceptions=True)  # pyright: ignore[reportPrivateUsage]
        parent.close()


@contextmanager
def hosted_proxy(rules: EgressRules) -> Generator[CallProxy]:
    """:func:`call_proxy` on an event loop of its own, in a thread.

    For a command that outlives the call that started it (an interactive
    process): the proxy serves until the context closes, whatever the caller's
    event loop does meanwhile.

    Raises:
        OSError: The proxy could not start.
    """
    started = threading.Event()
    box: dict[str, Any] = {}

    async def serve() -> None:
        stop = asyncio.Event()
        try:
            async with call_proxy(rules) as proxy:
                box.update(proxy=proxy, stop=stop, loop=asyncio.get_running_loop())
                started.set()
                await stop.wait()
        except BaseException as exc:  # handed to the starting thread
            box["error"] = exc
        finally:
            started.set()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True, name="zuno-proxy")
    thread.start()
    started.wait()
    if "proxy" not in box:
        thread.join()
        raise OSError(f"the network proxy could not start: {box.get('error')}")
    try:
        yield box["proxy"]
    finally:
        with contextlib.suppress(RuntimeError):  # its loop ended already
            box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(timeout=10)
