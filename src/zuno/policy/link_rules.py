"""Path rules follow the file, not the name: files with several names (hard links).

A deny rule on ``secrets/**`` is matched on the name a call uses. A hard link
``notes.txt`` to ``secrets/key`` is the same file under a name no rule covers.
The kernel does not say what a file's other names are, and finding them means
walking every folder of the file system, so the rule here is conservative:

* a regular file with one link has one name, the one the rules were matched on;
* a regular file with more than one link is refused whenever a deny rule with a
  wildcard is in force for the tool (its other name could be anywhere the
  wildcard reaches), and, under deny rules that each name one path exactly, when
  it is one of those paths (compared by device and inode, which is exact).

Folders cannot be hard-linked, and symlinks are resolved before rules match.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

__all__ = ["link_refusal"]


def link_refusal(st: os.stat_result, patterns: Sequence[str], workspace: str) -> str | None:
    """Why a file's content must not be shown under these deny patterns, or None.

    Args:
        st: The file's status, taken from the opened descriptor where there is one.
        patterns: The patterns of the deny rules in force for the reading tool.
        workspace: The workspace, a real absolute path (relative patterns start there).
    """
    if not stat.S_ISREG(st.st_mode) or st.st_nlink < 2 or not patterns:
        return None
    if any("*" in p or "?" in p for p in patterns):
        return (
            f"it has {st.st_nlink} names (hard links), and while a deny rule with a "
            "wildcard is in force Zuno cannot tell whether another of its names is denied"
        )
    for pattern in patterns:
        path = pattern if pattern.startswith("/") else os.path.join(workspace, pattern)
        try:
            other = os.stat(path)
        except (OSError, ValueError):
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            return f"it is another name (a hard link) of {pattern}, which a deny rule covers"
    return None
