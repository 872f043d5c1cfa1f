"""The apply_patch engine: parse, verify against the files, write all or nothing.

The format is described in ``spec/apply_patch.md``. Typical use::

    plan = plan_patch(text, resolve)      # verify only: the diff for an approval prompt
    plan = apply_patch(text, resolve)     # verify, then write every change or none
    print(plan.output)                    # "Success. Updated the following files: ..."

``resolve`` maps a patch path to a :class:`~zuno.beneath.Confined` path (the
root it must stay beneath, and the path from there) and raises for a path under
no root (the tools pass :meth:`zuno.tool.ToolContext.resolve_writable`). Files
are read and written relative to a descriptor of that root, so a symlink swapped
in meanwhile cannot lead them out of it; an optional ``check`` looks at where
each change really lands before anything is written (see :mod:`zuno.landing`).

Errors::

    PatchError           malformed patch, refused path, or lines not found; nothing written
      PatchWriteError    the write phase failed; ``restored`` says whether all was put back
"""

from __future__ import annotations

from zuno.patch.apply import PatchPlan, PathResolver, apply_patch, plan_patch
from zuno.patch.commit import FileChange, commit_changes
from zuno.patch.matching import MatchLevel, ascii_punctuation, normalize_punctuation
from zuno.patch.model import (
    AddFile,
    BodyLine,
    Chunk,
    DeleteFile,
    LineKind,
    Operation,
    Patch,
    PatchError,
    PatchWriteError,
    UpdateFile,
)
from zuno.patch.parser import parse_patch
from zuno.patch.textfile import BOM, TextFile

__all__ = [
    "BOM",
    "AddFile",
    "BodyLine",
    "Chunk",
    "DeleteFile",
    "FileChange",
    "LineKind",
    "MatchLevel",
    "Operation",
    "Patch",
    "PatchError",
    "PatchPlan",
    "PatchWriteError",
    "PathResolver",
    "TextFile",
    "UpdateFile",
    "apply_patch",
    "ascii_punctuation",
    "commit_changes",
    "normalize_punctuation",
    "parse_patch",
    "plan_patch",
]
