"""A tiny language server for failure cases pyright will not produce on demand.

Run as ``python fake_lsp_server.py MODE``. Every received method is appended
to the file named by ``$FAKE_LSP_LOG`` (one per line); the process id is
appended to ``$FAKE_LSP_PID``. Modes change how ``textDocument/hover`` is met:

- ``ok``: answered with ``fake hover``;
- ``hang``: never answered;
- ``crash``: the server exits;
- ``garbage``: the server writes something that is not LSP framing;
- ``config``: the server asks ``workspace/configuration`` for section
  ``fake.answer`` and answers the hover with what it got;
- ``shapes``: the answers take the protocol's less common shapes: a hover of
  marked strings, definitions as links, flat symbols, a workspace symbol that
  names its file only;
- ``malformed``: the hover answer and the diagnostics published on ``didOpen``
  are not valid LSP.

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
    if mode == "shapes":
        contents: Any = ["plain part", {"language": "fake", "value": "marked part"}]
        send({"id": request_id, "result": {"contents": contents}})
        return
    if mode == "malformed":
        send({"id": request_id, "result": {"contents": {"kind": "plaintext"}}})
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


def span(line: int, start: int, end: int) -> dict[str, Any]:
    return {"start": {"line": line, "character": start}, "end": {"line": line, "character": end}}


def shapes(method: str, params: dict[str, Any], root: str) -> Any:
    """The ``shapes`` mode's answer to ``method``."""
    if method == "textDocument/definition":
        uri = params["textDocument"]["uri"]
        link = {
            "targetUri": uri,
            "targetRange": span(0, 0, 9),
            "targetSelectionRange": span(0, 5, 9),
        }
        return [link]
    if method == "textDocument/documentSymbol":
        uri = params["textDocument"]["uri"]
        return [
            {"name": "Some", "kind": 23, "location": {"uri": uri, "range": span(0, 0, 4)}},
            {"name": "TEXT", "kind": 22, "location": {"uri": uri, "range": span(0, 5, 9)}},
        ]
    return [{"name": "Some", "kind": 26, "location": {"uri": root + "/m.fake"}}]


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
    if mode == "shapes":
        for provider in ("definition", "documentSymbol", "workspaceSymbol"):
            capabilities[f"{provider}Provider"] = True
    root = ""
    while True:
        message = read()
        method = message.get("method", "")
        log(method)
        if method == "initialize":
            root = message["params"]["rootUri"]
            send({"id": message["id"], "result": {"capabilities": capabilities}})
        elif method == "textDocument/didOpen" and mode == "malformed":
            uri = message["params"]["textDocument"]["uri"]
            bad = {"uri": uri, "version": 1, "diagnostics": [{"message": 7}]}
            send({"method": "textDocument/publishDiagnostics", "params": bad})
        elif mode == "shapes" and method in (
            "textDocument/definition",
            "textDocument/documentSymbol",
            "workspace/symbol",
        ):
            send({"id": message["id"], "result": shapes(method, message["params"], root)})
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
