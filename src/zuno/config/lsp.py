"""The ``lsp`` section of ``zuno.json``: which language server serves which files.

::

    {
      "lsp": {
        "servers": {
          ".py": {"command": ["pyright-langserver", "--stdio"]},
          ".rs": {"command": ["rust-analyzer"], "install": "rustup component add rust-analyzer"}
        },
        "request_timeout": 30,
        "startup_timeout": 60
      }
    }

Servers are keyed by file extension. Python (``.py``, ``.pyi``) is served by
``pyright-langserver --stdio`` unless configured otherwise; a configured
extension replaces the built-in entry for that extension only. A command's
program is looked up next to the running Python first (a virtual
environment's ``bin``), then on ``PATH``
(:func:`zuno.execution.server_launch.find_program`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

__all__ = [
    "DEFAULT_SERVERS",
    "LANGUAGE_IDS",
    "LspServerSettings",
    "LspSettings",
]


class _Section(BaseModel):
    # defer_build: validators are built on first use, not when zuno starts.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class LspServerSettings(_Section):
    """One language server: how to start it and what to tell it."""

    command: list[str] = Field(min_length=1)
    """The program and its arguments; it must speak LSP over stdio."""
    language_id: str | None = None
    """The LSP language id of its files (default: from the extension, ``python`` for ``.py``)."""
    install: str | None = None
    """How to install the program, quoted when it is missing."""
    initialization_options: dict[str, Any] | None = None
    """Sent as ``initializationOptions`` in ``initialize``."""
    settings: dict[str, Any] = Field(default_factory=lambda: {})
    """Answers to the server's ``workspace/configuration`` requests, by dotted section."""
    ready_message: str | None = None
    """A regular expression: at startup, wait (within ``startup_timeout``) for a
    ``window/logMessage`` matching it, the server's sign that it knows the workspace's
    files. Without it, questions are asked as soon as ``initialize`` is answered."""
    sandbox: bool = True
    """Run confined, like ``shell`` (no secrets in the environment). ``false`` opts
    out, and is honoured only in the user's own file."""
    network: bool = False
    """Whether the confined server may use the network."""

    _from_workspace: bool = PrivateAttr(default=False)

    @property
    def from_workspace(self) -> bool:
        """Whether this entry comes from the workspace's (trusted) ``zuno.json``."""
        return self._from_workspace

    def mark_from_workspace(self) -> None:
        """Record that this entry comes from the workspace's trusted ``zuno.json``."""
        self._from_workspace = True

    @field_validator("command")
    @classmethod
    def _program_not_empty(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the first element of command must name a program")
        return value

    @field_validator("ready_message")
    @classmethod
    def _a_regex(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a regular expression: {exc}") from None
        return value


DEFAULT_SERVERS: dict[str, LspServerSettings] = {
    ext: LspServerSettings(
        command=["pyright-langserver", "--stdio"],
        language_id="python",
        install="pip install pyright (it needs node on PATH)",
        # pyright answers before it has listed the workspace's files; until then
        # references and workspace symbols only see the files already opened.
        ready_message=r"^(Found \d+ source files?|No source files found)",
        # Confined like any server, but pyright exits on its first request when
        # the network-off socket filter refuses it local sockets; it reaches no host.
        network=True,
    )
    for ext in (".py", ".pyi")
}
"""The built-in servers, by extension."""

LANGUAGE_IDS: dict[str, str] = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".jsx": "javascriptreact",
    ".ts": "typescript",
    ".tsx": "typescriptreact",
    ".rs": "rust",
    ".go": "go",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".hpp": "cpp",
    ".java": "java",
    ".rb": "ruby",
    ".lua": "lua",
    ".sh": "shellscript",
}
"""LSP language ids of common extensions (a server's ``language_id`` wins)."""


class LspSettings(_Section):
    """Language servers used by the ``lsp`` tool, and how long to wait for them."""

    servers: dict[str, LspServerSettings] = Field(default_factory=lambda: {})
    """Servers by file extension (``".py"``); these replace the built-in ones per extension."""
    request_timeout: float = Field(default=30.0, gt=0, le=600)
    """Seconds one request (or the wait for a file's diagnostics) may take."""
    startup_timeout: float = Field(default=60.0, gt=0, le=600)
    """Seconds a server may take to start and answer ``initialize``."""

    @field_validator("servers")
    @classmethod
    def _extensions(cls, value: dict[str, LspServerSettings]) -> dict[str, LspServerSettings]:
        for ext in value:
            if not ext.startswith(".") or len(ext) < 2 or "/" in ext:
                raise ValueError(f"server keys are file extensions like '.py', got {ext!r}")
        return {ext.lower(): server for ext, server in value.items()}

    def all_servers(self) -> dict[str, LspServerSettings]:
        """The built-in servers with the configured ones over them, by extension."""
        return {**DEFAULT_SERVERS, **self.servers}

    def server_for(self, path: Path) -> LspServerSettings | None:
        """The server of ``path``'s extension, or None when no server serves it."""
        return self.all_servers().get(path.suffix.lower())

    def language_id(self, path: Path, server: LspServerSettings) -> str:
        """The LSP language id of ``path``."""
        if server.language_id:
            return server.language_id
        ext = path.suffix.lower()
        return LANGUAGE_IDS.get(ext, ext.removeprefix(".") or "plaintext")
