"""What a language server sends the client unasked, and the answers it gets.

Requests from the server: ``workspace/configuration`` is answered from the
server's ``settings`` in ``zuno.json``, ``workspace/workspaceFolders`` with the
one workspace, registrations and window requests with an empty result; any
other request is refused as not supported. Notifications: diagnostics are kept
(see :mod:`zuno.integrations.lsp.diagnostics`), and log messages are matched against the
server's ``ready_message``, which tells when it has finished listing the
workspace.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from zuno.config.lsp import LspServerSettings
from zuno.integrations.lsp.connection import MethodNotFound
from zuno.integrations.lsp.diagnostics import PublishedDiagnostics
from zuno.integrations.lsp.documents import path_to_uri
from zuno.integrations.lsp.framing import json_array, json_object

__all__ = ["InboundMessages"]

_EMPTY_ANSWERS = frozenset(
    {
        "client/registerCapability",
        "client/unregisterCapability",
        "window/workDoneProgress/create",
        "window/showMessageRequest",
        "window/showDocument",
    }
)
"""Requests acknowledged without acting on them."""


class InboundMessages:
    """The client's side of the server's requests and notifications (an ``InboundHandler``).

    Attributes:
        diagnostics: What the server published, by document.
        ready: Whether the server said its ready message since it was last
            expected (always True for a server without one).
    """

    def __init__(self, workspace: Path, server: LspServerSettings) -> None:
        """The handler for ``server`` running in ``workspace``."""
        self.workspace = workspace
        self.server = server
        self.diagnostics = PublishedDiagnostics()
        self._ready_pattern = re.compile(server.ready_message) if server.ready_message else None
        self.ready = self._ready_pattern is None

    @property
    def has_ready_message(self) -> bool:
        """Whether the server announces with a log message that it is ready."""
        return self._ready_pattern is not None

    def answer(self, method: str, params: Any) -> Any:
        """The result of the server's request ``method``.

        Raises:
            MethodNotFound: ``method`` is not a request this client serves.
        """
        if method == "workspace/configuration":
            items = json_array(json_object(params).get("items"))
            return [self._setting(item) for item in items]
        if method == "workspace/workspaceFolders":
            uri = path_to_uri(self.workspace)
            return [{"uri": uri, "name": self.workspace.name or "workspace"}]
        if method in _EMPTY_ANSWERS:
            return None
        raise MethodNotFound(method)

    def notice(self, method: str, params: Any) -> None:
        """Take in the server's notification ``method``."""
        if method == "textDocument/publishDiagnostics":
            self.diagnostics.take(params)
        elif method == "window/logMessage" and self._ready_pattern is not None:
            text = json_object(params).get("message")
            if isinstance(text, str) and self._ready_pattern.search(text):
                self.ready = True

    def _setting(self, item: Any) -> Any:
        section = json_object(item).get("section")
        value: Any = self.server.settings
        if not isinstance(section, str) or not section:
            return value or None
        for part in section.split("."):
            scope = json_object(value)
            if part not in scope:
                return None
            value = scope[part]
        return value
