"""The files a workspace ``zuno.json`` runs, pinned by digest when the user trusts it.

Trusting ``zuno.json`` alone is not enough: a trusted file that names a hook
``./scripts/hook.sh`` or an MCP server ``python tools/server.py`` runs whatever
those files hold at the time, and they are ordinary workspace files. So
``zuno trust`` records the SHA-256 of every file inside the workspace that the
configuration names as something to run (hook commands, MCP server commands
and their arguments, language server commands); a later change to any of them
makes the workspace untrusted again, like a change to ``zuno.json`` itself.

A word names a file when it is an existing regular file inside the workspace,
relative to it or absolute (``./x.sh``, ``scripts/x.py``, ``/ws/bin/tool``).
Hook commands are shell text: they are split into words the way a shell
would, and words joined by ``;``, ``&&`` or ``|`` are split too.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import Path
from typing import Any, cast

__all__ = ["file_digests", "named_files"]

_SHELL_GLUE = re.compile(r"[;&|()<>`$\s]+")
"""What separates words inside a shell command besides spaces."""


def _words(command: object) -> list[str]:
    """The words of a shell command string, or of an argv list."""
    if isinstance(command, list):
        return [str(w) for w in cast(list[Any], command)]
    if not isinstance(command, str):
        return []
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    found: list[str] = []
    for word in words:
        found.append(word)
        found.extend(p for p in _SHELL_GLUE.split(word) if p and p != word)
    return found


def _commands(data: dict[str, Any]) -> list[object]:
    """Every command-like value of a configuration: hook commands, servers' argv."""
    found: list[object] = []
    hooks: Any = data.get("hooks")
    if isinstance(hooks, dict):
        for entries in cast(dict[str, Any], hooks).values():
            if isinstance(entries, list):
                for entry in cast(list[Any], entries):
                    if isinstance(entry, dict):
                        found.append(cast(dict[str, Any], entry).get("command"))
    for section in ("mcp", "lsp"):
        block: Any = data.get(section)
        servers: Any = (
            cast(dict[str, Any], block).get("servers") if isinstance(block, dict) else None
        )
        if not isinstance(servers, dict):
            continue
        for server in cast(dict[str, Any], servers).values():
            if not isinstance(server, dict):
                continue
            entry = cast(dict[str, Any], server)
            found.append(entry.get("command"))
            found.append(entry.get("args"))
    return found


def named_files(workspace: Path, data: dict[str, Any]) -> list[str]:
    """The workspace-relative paths of the files inside ``workspace`` that ``data`` runs."""
    root = workspace.resolve()
    found: set[str] = set()
    for command in _commands(data):
        for word in _words(command):
            if not word or word.startswith("-") or "\0" in word:
                continue
            candidate = Path(word).expanduser()
            if not candidate.is_absolute():
                candidate = root / candidate
            try:
                real = candidate.resolve()
                if real == root or root not in real.parents or not real.is_file():
                    continue
            except (OSError, RuntimeError):
                continue
            found.add(str(real.relative_to(root)))
    return sorted(found)


def file_digests(workspace: Path, names: list[str]) -> dict[str, str]:
    """SHA-256 of each named file's content now (``missing`` when it cannot be read)."""
    digests: dict[str, str] = {}
    for name in names:
        try:
            digests[name] = hashlib.sha256((workspace / name).read_bytes()).hexdigest()
        except OSError:
            digests[name] = "missing"
    return digests
