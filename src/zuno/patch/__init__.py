"""The apply_patch engine: parse, verify against the files, write all or nothing.

The format is described in ``docs/contract.md`` (its apply_patch section). Typical use::

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

from typing import TYPE_CHECKING

from zuno.lazy_names import lazy_names

# Public names load on first use (see zuno.lazy_names): the edit tool needs the
# text files and commits, not the patch parser; describing a tool needs none of it.
if TYPE_CHECKING:
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

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "BOM": "zuno.patch.textfile",
        "AddFile": "zuno.patch.model",
        "BodyLine": "zuno.patch.model",
        "Chunk": "zuno.patch.model",
        "DeleteFile": "zuno.patch.model",
        "FileChange": "zuno.patch.commit",
        "LineKind": "zuno.patch.model",
        "MatchLevel": "zuno.patch.matching",
        "Operation": "zuno.patch.model",
        "Patch": "zuno.patch.model",
        "PatchError": "zuno.patch.model",
        "PatchPlan": "zuno.patch.apply",
        "PatchWriteError": "zuno.patch.model",
        "PathResolver": "zuno.patch.apply",
        "TextFile": "zuno.patch.textfile",
        "UpdateFile": "zuno.patch.model",
        "apply_patch": "zuno.patch.apply",
        "ascii_punctuation": "zuno.patch.matching",
        "commit_changes": "zuno.patch.commit",
        "normalize_punctuation": "zuno.patch.matching",
        "parse_patch": "zuno.patch.parser",
        "plan_patch": "zuno.patch.apply",
    },
)
