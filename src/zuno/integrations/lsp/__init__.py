"""A language-server client, used by the ``lsp`` tool.

- :mod:`zuno.config.lsp`: the ``lsp`` section of ``zuno.json`` (servers by extension).
- :mod:`zuno.integrations.lsp.framing`: ``Content-Length`` framing of JSON-RPC messages.
- :mod:`zuno.integrations.lsp.documents`: URIs, position conversion, opened documents.
- :mod:`zuno.integrations.lsp.errors`: the client's errors, drawn as a tree.
- :mod:`zuno.integrations.lsp.protocol`: messages as ``lsprotocol`` types, and their JSON.
- :mod:`zuno.integrations.lsp.connection`: one server process and the JSON-RPC stream over its
  stdio.
- :mod:`zuno.integrations.lsp.diagnostics`: the diagnostics a server published, numbered.
- :mod:`zuno.integrations.lsp.inbound`: the server's requests and notifications, and their answers.
- :mod:`zuno.integrations.lsp.client`: a session: the handshake, documents, questions, shutdown.
- :mod:`zuno.integrations.lsp.pool`: the servers of this process, started lazily, killed with it.
- :mod:`zuno.integrations.lsp.render`: answers as compact text.

Nothing here imports :mod:`zuno.config.loading`, which imports the settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zuno.core.lazy_names import lazy_names

# Public names load on first use (see zuno.core.lazy_names): importing one submodule
# (the settings, for the configuration) must not import the whole package.
if TYPE_CHECKING:
    from zuno.config.lsp import DEFAULT_SERVERS, LspServerSettings, LspSettings
    from zuno.execution.server_launch import find_program
    from zuno.integrations.lsp.client import LspClient
    from zuno.integrations.lsp.errors import (
        LspError,
        RequestTimeout,
        ResponseError,
        ServerExited,
        ServerUnavailable,
    )
    from zuno.integrations.lsp.pool import LSP_SERVERS, ServerPool

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
        "DEFAULT_SERVERS": "zuno.config.lsp",
        "LSP_SERVERS": "zuno.integrations.lsp.pool",
        "LspClient": "zuno.integrations.lsp.client",
        "LspError": "zuno.integrations.lsp.errors",
        "LspServerSettings": "zuno.config.lsp",
        "LspSettings": "zuno.config.lsp",
        "RequestTimeout": "zuno.integrations.lsp.errors",
        "ResponseError": "zuno.integrations.lsp.errors",
        "ServerExited": "zuno.integrations.lsp.errors",
        "ServerPool": "zuno.integrations.lsp.pool",
        "ServerUnavailable": "zuno.integrations.lsp.errors",
        "find_program": "zuno.execution.server_launch",
    },
)
