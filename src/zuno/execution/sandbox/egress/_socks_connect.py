"""An SSH ``ProxyCommand`` for ``proxy`` network mode: HOST PORT through the call's SOCKS5 proxy.

Usage: ``python -I -S _socks_connect.py HOST PORT``. Connects to the proxy on
the namespace's loopback (``ZUNO_SOCKS_PORT``, 3128 by default), asks it for
HOST:PORT (by name: the proxy resolves and checks), then copies stdin to the
connection and the connection to stdout until either side ends. ``ssh`` runs
it for every connection when ``GIT_SSH_COMMAND`` (set by Zuno in proxy mode)
names it, so ``git`` over SSH reaches an allowed ``host:22``.

Standard library only: it runs inside the sandbox.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading

_REPLIES = {
    1: "the proxy failed",
    2: "not allowed by the rules (the call's result says why)",
    3: "network unreachable",
    4: "host unreachable",
    5: "connection refused",
    7: "command not supported",
    8: "address type not supported",
}


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            raise OSError("the proxy closed the connection")
        data += more
    return data


def _connect(host: str, port: int) -> socket.socket:
    """A connection to host:port through the SOCKS5 proxy; OSError says why not."""
    proxy_port = int(os.environ.get("ZUNO_SOCKS_PORT", "3128"))
    sock = socket.create_connection(("127.0.0.1", proxy_port))
    sock.sendall(b"\x05\x01\x00")
    if _exactly(sock, 2) != b"\x05\x00":
        raise OSError("the proxy wants an authentication this helper does not speak")
    name = host.encode("idna")
    sock.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + struct.pack("!H", port))
    _, code, _, kind = _exactly(sock, 4)
    size = {1: 4, 4: 16}.get(kind) or _exactly(sock, 1)[0]
    _exactly(sock, size + 2)  # the bound address and port: not needed
    if code != 0:
        raise OSError(_REPLIES.get(code, f"refused (SOCKS reply {code})"))
    return sock


def _pump(read_fd: int, sock: socket.socket) -> None:
    """stdin to the connection, then half-close it."""
    try:
        while data := os.read(read_fd, 65536):
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def main(argv: list[str]) -> int:
    """Relay stdin and stdout through the proxy to HOST PORT."""
    if len(argv) != 2 or not argv[1].isdigit():
        sys.stderr.write("zuno socks connect: usage: HOST PORT\n")
        return 2
    host, port = argv[0], int(argv[1])
    try:
        sock = _connect(host, port)
    except OSError as exc:
        sys.stderr.write(f"zuno: cannot reach {host}:{port} through the network proxy: {exc}\n")
        return 1
    threading.Thread(target=_pump, args=(0, sock), daemon=True).start()
    try:
        while data := sock.recv(65536):
            os.write(1, data)
    except OSError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
