"""A language-server client, used by the ``lsp`` tool.

- :mod:`zuno.lsp.settings`: the ``lsp`` section of ``zuno.json`` (servers by extension).
- :mod:`zuno.lsp.framing`: ``Content-Length`` framing of JSON-RPC messages.
- :mod:`zuno.lsp.documents`: URIs, position conversion, opened documents.
- :mod:`zuno.lsp.errors`: the client's errors, drawn as a tree.
- :mod:`zuno.lsp.connection`: one server process and the JSON-RPC stream over its stdio.
- :mod:`zuno.lsp.diagnostics`: the diagnostics a server published, numbered.
- :mod:`zuno.lsp.inbound`: the server's requests and notifications, and their answers.
- :mod:`zuno.lsp.client`: a session: the handshake, documents, questions, shutdown.
- :mod:`zuno.lsp.pool`: the servers of this process, started lazily, killed with it.
- :mod:`zuno.lsp.render`: answers as compact text.

Nothing here imports :mod:`zuno.config`, which imports the settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zuno.lazy_names import lazy_names

# Public names load on first use (see zuno.lazy_names): importing one submodule
# (the settings, for the configuration) must not import the whole package.
if TYPE_CHECKING:
    from zuno.lsp.client import LspClient
    from zuno.lsp.errors import (
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

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "DEFAULT_SERVERS": "zuno.lsp.settings",
        "LSP_SERVERS": "zuno.lsp.pool",
        "LspClient": "zuno.lsp.client",
        "LspError": "zuno.lsp.errors",
        "LspServerSettings": "zuno.lsp.settings",
        "LspSettings": "zuno.lsp.settings",
        "RequestTimeout": "zuno.lsp.errors",
        "ResponseError": "zuno.lsp.errors",
        "ServerExited": "zuno.lsp.errors",
        "ServerPool": "zuno.lsp.pool",
        "ServerUnavailable": "zuno.lsp.errors",
        "find_program": "zuno.lsp.settings",
    },
)
