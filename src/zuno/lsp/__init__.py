"""A language-server client, used by the ``lsp`` tool.

- :mod:`zuno.lsp.settings`: the ``lsp`` section of ``zuno.json`` (servers by extension).
- :mod:`zuno.lsp.framing`: ``Content-Length`` framing of JSON-RPC messages.
- :mod:`zuno.lsp.documents`: URIs, position conversion, opened documents.
- :mod:`zuno.lsp.client`: one server process and the protocol spoken with it.
- :mod:`zuno.lsp.pool`: the servers of this process, started lazily, killed with it.
- :mod:`zuno.lsp.render`: answers as compact text.

Nothing here imports :mod:`zuno.config`, which imports the settings.
"""

from __future__ import annotations

from zuno.lsp.client import (
    LspClient,
    LspError,
    RequestTimeout,
    ResponseError,
    ServerExited,
    ServerUnavailable,
)
from zuno.lsp.pool import LSP_SERVERS, ServerPool
from zuno.lsp.settings import DEFAULT_SERVERS, LspServerSettings, LspSettings, find_program

__all__ = [
    "DEFAULT_SERVERS",
    "LSP_SERVERS",
    "LspClient",
    "LspError",
    "LspServerSettings",
    "LspSettings",
    "RequestTimeout",
    "ResponseError",
    "ServerExited",
    "ServerPool",
    "ServerUnavailable",
    "find_program",
]
