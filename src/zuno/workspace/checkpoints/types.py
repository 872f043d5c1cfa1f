"""The values checkpoints deal in: entries, changes, snapshots, what a restore did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "EXECUTABLE",
    "GITLINK",
    "SYMLINK",
    "Change",
    "CheckpointError",
    "Entry",
    "Restored",
    "Snapshot",
]

GITLINK = "160000"
SYMLINK = "120000"
EXECUTABLE = "100755"


class CheckpointError(Exception):
    """A snapshot, a comparison or a restore could not be done; the message says why."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One path as a snapshot holds it: git's mode and the object id of its content."""

    mode: str
    """``100644`` a file, ``100755`` an executable, ``120000`` a symlink, ``160000`` a
    nested repository's commit."""
    oid: str

    @property
    def kind(self) -> Literal["file", "executable", "symlink", "repository"]:
        """What the entry is, in words."""
        if self.mode == SYMLINK:
            return "symlink"
        if self.mode == GITLINK:
            return "repository"
        return "executable" if self.mode == EXECUTABLE else "file"


@dataclass(frozen=True, slots=True)
class Change:
    """How one path differs between two snapshots (``old`` before, ``new`` after)."""

    path: str
    old: Entry | None
    new: Entry | None

    @property
    def status(self) -> Literal["added", "deleted", "modified", "mode", "type"]:
        """``added``, ``deleted``, ``modified`` (content), ``mode`` (only the executable
        bit) or ``type`` (a file became a symlink, or back)."""
        if self.old is None:
            return "added"
        if self.new is None:
            return "deleted"
        if (self.old.mode == SYMLINK) != (self.new.mode == SYMLINK):
            return "type"
        if self.old.oid == self.new.oid:
            return "mode"
        return "modified"

    def as_dict(self) -> dict[str, str | None]:
        """The change as plain JSON values."""
        return {
            "path": self.path,
            "status": self.status,
            "old_mode": self.old.mode if self.old else None,
            "new_mode": self.new.mode if self.new else None,
        }


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A recorded checkpoint: its commit, and files git could not read (left out)."""

    commit: str
    unreadable: tuple[str, ...] = ()


@dataclass(slots=True)
class Restored:
    """What a restore did, path by path."""

    written: list[str] = field(default_factory=lambda: [])
    removed: list[str] = field(default_factory=lambda: [])
    skipped: list[str] = field(default_factory=lambda: [])
    """Nested repositories, which are never restored."""
    too_large: list[str] = field(default_factory=lambda: [])
    """Files over the size limit, recorded by size and hash only: not restored."""
