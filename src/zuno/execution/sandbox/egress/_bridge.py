"""Run inside a call's sandbox in ``proxy`` mode: hand Zuno a listener, then exec the command.

Usage: ``python -I -S _bridge.py FD PORT -- COMMAND...``. FD is this call's end
of a UNIX socket pair made by Zuno. The bridge opens a TCP listener on the
namespace's loopback at PORT, sends it to Zuno over FD (SCM_RIGHTS), closes
both, and execs COMMAND: the command holds no descriptor of the proxy, and
the loopback port it was told about (``HTTP_PROXY``) is served by Zuno.

Standard library only: it runs before anything else, under the sandbox.
"""

from __future__ import annotations

import os
import socket
import sys


def main(argv: list[str]) -> int:
    """Send the listener over FD, then exec the command (returns only on failure)."""
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("zuno egress bridge: usage: FD PORT -- COMMAND...\n")
        return 127
    fd, port = int(argv[0]), int(argv[1])
    command = argv[3:]
    try:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(256)
        channel = socket.socket(fileno=fd)
        socket.send_fds(channel, [b"L"], [listener.fileno()])
        listener.close()
        channel.close()
    except OSError as exc:
        sys.stderr.write(f"zuno: the network proxy could not start in the sandbox: {exc}\n")
        return 126
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"zuno: cannot run {command[0]!r}: {exc}\n")
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
