"""What ``read`` says of a path that does not exist: the close matches it can find.

First near names in the deepest folder of the path that exists (the first
wrong name, whichever part of the path it is), then files of the same name
anywhere in the workspace, found by a bounded breadth-first walk.
"""

from __future__ import annotations

import difflib
import os
from collections import deque
from pathlib import Path

from zuno.tools.read_page import shown_path

__all__ = ["not_found_message"]

_SUGGESTIONS = 5
_WALK_MAX_DIRS = 2000
_WALK_MAX_ENTRIES = 50_000
_WALK_SKIP = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        "target",
        "dist",
        "build",
    }
)


def not_found_message(path: Path, shown: str, workspace: Path) -> str:
    """That ``shown`` does not exist, with the close matches found, if any."""
    matches = _close_matches(path, workspace)
    if not matches:
        return f"{shown} does not exist. Check the path, or search with glob."
    listed = ", ".join(shown_path(m, workspace) for m in matches)
    return f"{shown} does not exist. Did you mean: {listed}?"


def _close_matches(path: Path, workspace: Path) -> list[Path]:
    """Near names in the closest existing folder, then same-named files in the workspace."""
    found: list[Path] = []
    # Walk up to the deepest folder that exists; the part just below it is the
    # first wrong name, whichever component of the path it is.
    existing, missing = path.parent, path.name
    while not existing.is_dir() and existing != existing.parent:
        existing, missing = existing.parent, existing.name
    try:
        with os.scandir(existing) as entries:
            names = [e.name for _, e in zip(range(10_000), entries, strict=False)]
    except OSError:
        names = []
    for name in difflib.get_close_matches(missing, names, n=_SUGGESTIONS, cutoff=0.6):
        found.append(existing / name)
    for match in _walk_for(path.name, workspace):
        if match not in found:
            found.append(match)
        if len(found) >= _SUGGESTIONS * 2:
            break
    return found


def _walk_for(basename: str, root: Path) -> list[Path]:
    """Files named ``basename`` (any case) under ``root``, breadth first and bounded."""
    wanted = basename.lower()
    hits: list[Path] = []
    queue: deque[Path] = deque([root])
    dirs_seen = 0
    entries_seen = 0
    while queue and dirs_seen < _WALK_MAX_DIRS and entries_seen < _WALK_MAX_ENTRIES:
        folder = queue.popleft()
        dirs_seen += 1
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    entries_seen += 1
                    if entry.name.lower() == wanted:
                        hits.append(Path(entry.path))
                        if len(hits) >= _SUGGESTIONS:
                            return hits
                    # Symlinked folders are not followed: they can loop.
                    if entry.name not in _WALK_SKIP and entry.is_dir(follow_symlinks=False):
                        queue.append(Path(entry.path))
        except OSError:
            continue
    return hits
