"""The typed form of a parsed patch, and the errors of the patch engine.

A patch is a sequence of file operations::

    Patch
      AddFile      path, content (each line ends in a newline)
      DeleteFile   path
      UpdateFile   path, move_to, chunks
        Chunk      contexts (the ``@@ CONTEXT`` lines), body lines, end_of_file

Errors::

    PatchError           the patch is malformed or does not fit the files; nothing was written
      PatchWriteError    writing failed part-way; ``restored`` says whether every file was put back
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "AddFile",
    "BodyLine",
    "Chunk",
    "DeleteFile",
    "LineKind",
    "Operation",
    "Patch",
    "PatchError",
    "PatchWriteError",
    "UpdateFile",
]

LineKind = Literal[" ", "-", "+"]
"""The prefix of a chunk body line: context, removed, added."""


class PatchError(Exception):
    """The patch is malformed or does not fit the files. Nothing was written."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class PatchWriteError(PatchError):
    """Writing failed part-way.

    Attributes:
        restored: True when every file was put back as it was before the patch;
            False when the restore itself failed, so the files may be in a mixed state.
    """

    def __init__(self, message: str, *, restored: bool) -> None:
        super().__init__(message)
        self.restored = restored


@dataclass(frozen=True, slots=True)
class BodyLine:
    """One line of a chunk body: its prefix and its text (without the prefix)."""

    kind: LineKind
    text: str


@dataclass(frozen=True, slots=True)
class Chunk:
    """One located change of an update.

    Attributes:
        contexts: The ``@@ CONTEXT`` lines, outermost first; each narrows the search.
        body: The body lines in order.
        end_of_file: Whether ``*** End of File`` anchors the chunk at the end of the file.
        line: The 1-based patch line where the chunk starts.
    """

    contexts: tuple[str, ...]
    body: tuple[BodyLine, ...]
    end_of_file: bool
    line: int

    @property
    def old_lines(self) -> list[str]:
        """The lines the chunk expects in the file (context and removed)."""
        return [b.text for b in self.body if b.kind != "+"]

    @property
    def new_lines(self) -> list[str]:
        """The lines the chunk leaves in the file (context and added)."""
        return [b.text for b in self.body if b.kind != "-"]


@dataclass(frozen=True, slots=True)
class AddFile:
    """``*** Add File: PATH``: create (or replace) a file with ``content``."""

    path: str
    content: str
    line: int


@dataclass(frozen=True, slots=True)
class DeleteFile:
    """``*** Delete File: PATH``: remove an existing file."""

    path: str
    line: int


@dataclass(frozen=True, slots=True)
class UpdateFile:
    """``*** Update File: PATH``: change a file in place, optionally moving it."""

    path: str
    move_to: str | None
    chunks: tuple[Chunk, ...]
    line: int


Operation = AddFile | DeleteFile | UpdateFile
"""One file operation of a patch."""


@dataclass(frozen=True, slots=True)
class Patch:
    """A parsed patch: its operations in the order they were written."""

    operations: tuple[Operation, ...]
