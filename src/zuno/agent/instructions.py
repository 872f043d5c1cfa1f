"""Project instructions: the ``AGENTS.md`` files an agent reads before it starts.

A project tells coding agents how it wants to be worked on in ``AGENTS.md``
files (``CLAUDE.md`` in projects written for Claude Code). Zuno reads, in
this order, each one added to the system prompt under its path:

1. the user's own, beside the user's ``zuno.json`` (the config folder);
2. one per folder from the project root down to the current folder: the
   project root is the nearest folder at or above the workspace holding
   ``.git``, else the workspace itself; the current folder is the process's
   working folder when it lies inside the workspace, else the workspace.

So the file nearest the work comes last, and wins where they disagree. In a
folder with an ``AGENTS.md`` its ``CLAUDE.md`` is not read. Each file is
bounded (:data:`MAX_FILE_BYTES`); a file that cannot be read or is not UTF-8
text is passed over, never an error: instructions are advice, not authority.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "INSTRUCTION_NAMES",
    "MAX_FILE_BYTES",
    "InstructionFile",
    "instructions_prompt",
    "project_instructions",
]

INSTRUCTION_NAMES = ("AGENTS.md", "CLAUDE.md")
"""The file names read per folder, in order of preference: only the first found is read."""

MAX_FILE_BYTES = 32 * 1024
"""Bytes read from one file; the rest is left out, and the model is told so."""


@dataclass(frozen=True, slots=True)
class InstructionFile:
    """One instructions file as it was read.

    Attributes:
        path: Its absolute path.
        text: Its text (at most :data:`MAX_FILE_BYTES` bytes of it).
        truncated: Whether the file was longer than what was read.
    """

    path: Path
    text: str
    truncated: bool = False


def project_instructions(
    workspace: Path, *, user_folder: Path | None = None, here: Path | None = None
) -> list[InstructionFile]:
    """The instruction files of a session in ``workspace``, most general first.

    Args:
        workspace: The session's workspace.
        user_folder: The user's config folder (its ``AGENTS.md`` comes first);
            None reads none.
        here: The current folder (default: the process's); ignored unless it
            lies inside the workspace.
    """
    found: list[InstructionFile] = []
    if user_folder is not None:
        own = _read_folder(user_folder)
        if own is not None:
            found.append(own)
    for folder in _folders(workspace.resolve(), (here or Path.cwd()).resolve()):
        read = _read_folder(folder)
        if read is not None and all(read.path != f.path for f in found):
            found.append(read)
    return found


def instructions_prompt(files: Sequence[InstructionFile]) -> str:
    """The section of the system prompt that carries ``files`` ("" when there are none)."""
    if not files:
        return ""
    parts = [
        "Project instructions. The files below were read in this order; where they "
        "disagree, the later (nearer the work) wins. Follow them unless the user says "
        "otherwise."
    ]
    for file in files:
        cut = " (cut: the file is longer)" if file.truncated else ""
        parts.append(f"--- {file.path}{cut}\n{file.text.strip()}")
    return "\n\n".join(parts)


def _folders(workspace: Path, here: Path) -> list[Path]:
    """The folders read, from the project root down to the current folder."""
    root = _project_root(workspace)
    bottom = here if here == workspace or workspace in here.parents else workspace
    chain = [bottom, *bottom.parents]
    return list(reversed(chain[: chain.index(root) + 1]))


def _project_root(workspace: Path) -> Path:
    for folder in (workspace, *workspace.parents):
        if os.path.lexists(folder / ".git"):
            return folder
    return workspace


def _read_folder(folder: Path) -> InstructionFile | None:
    for name in INSTRUCTION_NAMES:
        path = folder / name
        if path.is_file():
            return _read(path)
    return None


def _read(path: Path) -> InstructionFile | None:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    truncated = len(data) > MAX_FILE_BYTES
    try:
        text = data[:MAX_FILE_BYTES].decode("utf-8", errors="ignore" if truncated else "strict")
    except UnicodeDecodeError:
        return None
    if not text.strip():
        return None
    return InstructionFile(path, text, truncated)
