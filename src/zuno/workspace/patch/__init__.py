"""The apply_patch engine: parse, verify against the files, write all or nothing.

The format is described in ``docs/contract.md`` (its apply_patch section). Typical use::

    plan = plan_patch(text, resolve)      # verify only: the diff for an approval prompt
    plan = apply_patch(text, resolve)     # verify, then write every change or none
    print(plan.output)                    # "Success. Updated the following files: ..."

``resolve`` maps a patch path to a :class:`~zuno.workspace.beneath.Confined` path (the
root it must stay beneath, and the path from there) and raises for a path under
no root (the tools pass :meth:`zuno.contract.tool.ToolContext.resolve_writable`). Files
are read and written relative to a descriptor of that root, so a symlink swapped
in meanwhile cannot lead them out of it; an optional ``check`` looks at where
each change really lands before anything is written (see :mod:`zuno.dispatch.landing`).

Errors::

    PatchError           malformed patch, refused path, or lines not found; nothing written
      PatchWriteError    the write phase failed; ``restored`` says whether all was put back
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zuno.core.lazy_names import lazy_names

# Public names load on first use (see zuno.core.lazy_names): the edit tool needs the
# text files and commits, not the patch parser; describing a tool needs none of it.
if TYPE_CHECKING:
    from zuno.workspace.patch.apply import PatchPlan, PathResolver, apply_patch, plan_patch
    from zuno.workspace.patch.commit import FileChange, commit_changes
    from zuno.workspace.patch.matching import MatchLevel, ascii_punctuation, normalize_punctuation
    from zuno.workspace.patch.model import (
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
    from zuno.workspace.patch.parser import parse_patch
    from zuno.workspace.patch.textfile import BOM, TextFile

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
        "BOM": "zuno.workspace.patch.textfile",
        "AddFile": "zuno.workspace.patch.model",
        "BodyLine": "zuno.workspace.patch.model",
        "Chunk": "zuno.workspace.patch.model",
        "DeleteFile": "zuno.workspace.patch.model",
        "FileChange": "zuno.workspace.patch.commit",
        "LineKind": "zuno.workspace.patch.model",
        "MatchLevel": "zuno.workspace.patch.matching",
        "Operation": "zuno.workspace.patch.model",
        "Patch": "zuno.workspace.patch.model",
        "PatchError": "zuno.workspace.patch.model",
        "PatchPlan": "zuno.workspace.patch.apply",
        "PatchWriteError": "zuno.workspace.patch.model",
        "PathResolver": "zuno.workspace.patch.apply",
        "TextFile": "zuno.workspace.patch.textfile",
        "UpdateFile": "zuno.workspace.patch.model",
        "apply_patch": "zuno.workspace.patch.apply",
        "ascii_punctuation": "zuno.workspace.patch.matching",
        "commit_changes": "zuno.workspace.patch.commit",
        "normalize_punctuation": "zuno.workspace.patch.matching",
        "parse_patch": "zuno.workspace.patch.parser",
        "plan_patch": "zuno.workspace.patch.apply",
    },
)
