"""Following a file that grows while a command runs: its last complete lines, and the rest.

The live view reads what running commands print from the files their output
already goes to (a command's artifacts, a job's log, an interactive process's
transcript), a tick at a time, never more than the end of a large burst.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OutputTail"]

_READ_MAX = 64 * 1024
"""The most read from one output file per tick (beyond it, only its end matters)."""


@dataclass
class OutputTail:
    """The end of a file that grows while a command runs."""

    path: Path
    offset: int = 0
    partial: bytes = b""

    def poll(self, into: deque[str]) -> bool:
        """Move the file's new complete lines into ``into``; whether anything new came."""
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return False
        if size <= self.offset:
            return False
        if size - self.offset > _READ_MAX:
            self.offset, self.partial = size - _READ_MAX, b""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(size - self.offset)
        except OSError:
            return False
        self.offset += len(data)
        *complete, self.partial = (self.partial + data).split(b"\n")
        for line in complete:
            text = line.decode("utf-8", "replace").rstrip("\r")
            if text.strip():
                into.append(text)
        return True

    @property
    def pending(self) -> str:
        """A line printed without its newline yet."""
        return self.partial.decode("utf-8", "replace").rstrip("\r")
