"""Changes to a workspace's source files, found by comparing two scans.

A language server learns about files it has not opened only through
``workspace/didChangeWatchedFiles``; without it, a file created or edited on
disk after the server started stays invisible to references and imports. Zuno
has no file watcher, so before each question the client scans the workspace
(names, sizes and mtimes of the server's file types, nothing read) and reports
what differs from the previous scan. The walk skips what servers skip too
(hidden folders, ``node_modules``, ``__pycache__``) and stops watching a
workspace larger than :data:`MAX_FILES`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["CHANGED", "CREATED", "DELETED", "MAX_FILES", "WorkspaceScan"]

CREATED, CHANGED, DELETED = 1, 2, 3
"""LSP ``FileChangeType`` values."""

MAX_FILES = 50_000
"""Past this many matching files the workspace is not watched (the scan would cost too much)."""

_SKIP = frozenset({"node_modules", "__pycache__", "venv", "site-packages"})

_Stamps = dict[str, tuple[int, int]]


class WorkspaceScan:
    """The source files of one workspace at the last scan, and what changed since."""

    def __init__(self, root: Path, extensions: Iterable[str]) -> None:
        self.root = root
        self.extensions = tuple(sorted({e.lower() for e in extensions}))
        self.too_large = False
        """Set when the workspace had more than :data:`MAX_FILES` files: no more scans."""
        self._stamps: _Stamps | None = None

    def changes(self) -> list[tuple[Path, int]]:
        """Files created, changed or deleted since the last call (none on the first)."""
        if self.too_large or not self.extensions:
            return []
        current = self._scan()
        if current is None:
            self.too_large = True
            self._stamps = None
            return []
        previous, self._stamps = self._stamps, current
        if previous is None:
            return []
        found: list[tuple[Path, int]] = []
        for path, stamp in current.items():
            before = previous.get(path)
            if before is None:
                found.append((Path(path), CREATED))
            elif before != stamp:
                found.append((Path(path), CHANGED))
        found += [(Path(p), DELETED) for p in previous if p not in current]
        return sorted(found)

    def _scan(self) -> _Stamps | None:
        stamps: _Stamps = {}
        todo = [str(self.root)]
        while todo:
            folder = todo.pop()
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        name = entry.name
                        if name.startswith("."):
                            continue
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                if name not in _SKIP:
                                    todo.append(entry.path)
                            elif name.lower().endswith(self.extensions):
                                st = entry.stat()
                                stamps[entry.path] = (st.st_mtime_ns, st.st_size)
                                if len(stamps) > MAX_FILES:
                                    return None
                        except OSError:
                            continue
            except OSError:
                continue
        return stamps
