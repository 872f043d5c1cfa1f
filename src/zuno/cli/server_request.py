"""A ``run`` request as the command server receives it: fields, descriptors and limits.

The launcher (:mod:`zuno.cli.launcher`) sends one length-prefixed frame of
fields (:func:`zuno.cli.server_wire.unpack`) with the caller's standard
descriptors, and its terminal, passed beside it (``SCM_RIGHTS``).
"""

from __future__ import annotations

import os
import socket

from zuno.cli.server_wire import PROTOCOL, unpack

__all__ = ["Request", "limits_problem", "parse_request", "receive_request"]


_MAX_REQUEST = 1 << 22  # a request: argv and environment, far below this


class Request:
    """A parsed ``run`` request."""

    def __init__(self, fields: list[bytes], fds: list[int]) -> None:
        self.identity = fields[2]
        self.cwd = fields[3]
        self.umask = int(fields[4])
        self.tty = fields[5] == b"tty"
        self.argv = [os.fsdecode(arg) for arg in unpack(fields[6])]
        self.environb: dict[bytes, bytes] = {}
        for item in unpack(fields[7]):
            key, sep, value = item.partition(b"=")
            if sep:
                self.environb[key] = value
        self.environ = {os.fsdecode(k): os.fsdecode(v) for k, v in self.environb.items()}
        self.limits: dict[str, tuple[int, int]] = {}
        for item in unpack(fields[8]):
            name, _, values = item.decode().partition("=")
            soft, _, hard = values.partition(":")
            self.limits[name] = (int(soft), int(hard))
        self.ignored = [int(signum) for signum in unpack(fields[9])]
        self.main_package = os.fsdecode(fields[10])
        self.fds = fds
        if not self.argv:
            raise ValueError("an empty argv")


def parse_request(fields: list[bytes], fds: list[int]) -> Request:
    """A ``run`` request from its fields. Raises ValueError on anything malformed."""
    if len(fields) != 11 or fields[0] != PROTOCOL or fields[1] != b"run":
        raise ValueError("not a zuno command server run request")
    return Request(fields, fds)


def receive_request(conn: socket.socket) -> tuple[bytes, list[int]]:
    import array

    fds = array.array("i")
    data, ancillary, _flags, _addr = conn.recvmsg(
        65536, socket.CMSG_SPACE(8 * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    received: list[int] = []
    for level, kind, blob in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(blob[: len(blob) - (len(blob) % fds.itemsize)])
            received.extend(fds)
    try:
        if len(data) < 4:
            data += _exactly(conn, 4 - len(data))
        size = int.from_bytes(data[:4], "big")
        if size > _MAX_REQUEST:
            raise ValueError(f"a request of {size} bytes")
        body = data[4:]
        if len(body) < size:
            body += _exactly(conn, size - len(body))
        if len(body) != size:
            raise ValueError("trailing bytes after a request")
    except BaseException:
        for fd in received:
            os.close(fd)
        raise
    return body, received


def _exactly(conn: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = conn.recv(size)
        if not chunk:
            raise ValueError("the caller hung up mid-request")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def limits_problem(limits: dict[str, tuple[int, int]]) -> str | None:
    import resource

    for name, (_soft, hard) in limits.items():
        resource_id = getattr(resource, name, None)
        if resource_id is None:
            continue
        _own_soft, own_hard = resource.getrlimit(resource_id)
        if own_hard != resource.RLIM_INFINITY and (
            hard == resource.RLIM_INFINITY or hard > own_hard
        ):
            return f"the caller's {name} ({hard}) is above the server's ({own_hard})"
    return None
