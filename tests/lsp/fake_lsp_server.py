"""A tiny language server for failure cases pyright will not produce on demand.

Run as ``python fake_lsp_server.py MODE``. Every received method is appended
to the file named by ``$FAKE_LSP_LOG`` (one per line); the process id is
appended to ``$FAKE_LSP_PID``. Modes change how ``textDocument/hover`` is met:

- ``ok``: answered with ``fake hover``;
- ``hang``: never answered;
- ``crash``: the server exits;
- ``garbage``: the server writes something that is not LSP framing;
- ``config``: the server asks ``workspace/configuration`` for section
  ``fake.answer`` and answers the hover with what it got.

Mode ``fail-start`` writes to stderr and exits before ``initialize``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def read() -> dict[str, Any]:
    length = 0
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode().partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return json.loads(sys.stdin.buffer.read(length))


def send(message: dict[str, Any]) -> None:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sys.stdout.buffer.flush()


def log(method: str) -> None:
    path = os.environ.get("FAKE_LSP_LOG")
    if path:
        with open(path, "a") as f:
            f.write(method + "\n")


def hover(mode: str, request_id: Any) -> None:
    if mode == "hang":
        return
    if mode == "crash":
        sys.exit(1)
    if mode == "garbage":
        sys.stdout.buffer.write(b"this is not a header\r\n\r\n")
        sys.stdout.buffer.flush()
        return
    text = "fake hover"
    if mode == "config":
        send(
            {
                "id": "cfg",
                "method": "workspace/configuration",
                "params": {"items": [{"section": "fake.answer"}]},
            }
        )
        while True:
            reply = read()
            if reply.get("id") == "cfg" and "method" not in reply:
                text = f"configured: {reply['result'][0]}"
                break
    send({"id": request_id, "result": {"contents": {"kind": "plaintext", "value": text}}})


def main() -> None:
    mode = sys.argv[1]
    pid_file = os.environ.get("FAKE_LSP_PID")
    if pid_file:
        with open(pid_file, "a") as f:
            f.write(f"{os.getpid()}\n")
    if mode == "fail-start":
        sys.stderr.write("fake: cannot start without a license\n")
        sys.exit(3)
    capabilities = {"hoverProvider": True, "textDocumentSync": 1}
    while True:
        message = read()
        method = message.get("method", "")
        log(method)
        if method == "initialize":
            send({"id": message["id"], "result": {"capabilities": capabilities}})
        elif method == "textDocument/hover":
            hover(mode, message["id"])
        elif method == "shutdown":
            send({"id": message["id"], "result": None})
        elif method == "exit":
            sys.exit(0)
        elif "id" in message and "method" in message:
            send({"id": message["id"], "error": {"code": -32601, "message": "no"}})


if __name__ == "__main__":
    main()
