"""The first call of a session, while the workspace's first full look still runs.

At session start the first full look (every file stat'ed, new ones hashed)
runs in the background (:meth:`zuno.checkpoints.Checkpoints.prepare`): at
200,000 files it takes tens of seconds. A side-effecting call arriving meanwhile
would wait for it. A file tool does not need to: it names, before it runs,
every path it will change. So its checkpoint is recorded in two halves:

1. before the call, the pre-images of its paths are copied into the store
   (:class:`EarlyCall`: a blob per file, or "absent"); the call then runs at once;
2. when the look ends, the checkpoint is the look's tree with those paths set
   to their pre-images, committed as the next link of the chain
   (:class:`EarlySnapshot`), and the call's row is given its id.

The look may have read a path before or after the call changed it: either way
the pre-image replaces what it read, and the other files are as the look saw
them (a change by someone else during the look is in the snapshot or in the
next one, as with any look). Only one call is recorded this way; calls after
it, and calls that cannot name their paths (``shell``), wait for the look.
A path given through a symbolic link, or outside the workspace, makes the call
wait too: the real path is not known for certain before the call.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from zuno.checkpoint_fast import Found

__all__ = ["EarlyCall", "EarlySnapshot", "plain_paths"]


@dataclass(frozen=True)
class EarlyCall:
    """The first half: a call's message and the pre-images of the paths it will change."""

    call_id: str
    attempt: int
    tool: str
    session_id: str
    message: str
    entries: dict[str, Found]

    def settled(
        self, commit: str | None, *, unreadable: tuple[str, ...] = (), reason: str = ""
    ) -> EarlySnapshot:
        """Its second half: the commit (None: none, for ``reason``)."""
        return EarlySnapshot(
            self.call_id, self.attempt, self.tool, self.session_id, commit, unreadable, reason
        )


@dataclass(frozen=True)
class EarlySnapshot:
    """The second half: the commit recorded before an early call, once the look ended."""

    call_id: str
    """The call it was recorded before."""
    attempt: int
    """Its attempt."""
    tool: str
    """The call's tool."""
    session_id: str
    """The call's session."""
    commit: str | None
    """The checkpoint's commit; None when the look failed (the call cannot be undone)."""
    unreadable: tuple[str, ...] = ()
    """Files the look could not read (left out of the snapshot)."""
    reason: str = ""
    """Why there is no commit."""


def plain_paths(workspace: Path, given: Sequence[str]) -> list[str] | None:
    """Workspace-relative paths of ``given`` when each lies plainly inside ``workspace``.

    Plainly: no symbolic link on the way (the path and its real location
    agree), not the workspace itself, not outside, not in a ``.git`` folder. None
    when any path is not.

    Args:
        workspace: The workspace (its real path).
        given: Paths as a tool call names them (relative to the workspace or absolute).
    """
    found: list[str] = []
    for raw in given:
        spelled = os.path.normpath(os.path.join(workspace, raw))
        if os.path.realpath(spelled) != spelled:
            return None
        rel = os.path.relpath(spelled, workspace)
        if rel == "." or rel.startswith("../") or rel == ".." or os.path.isabs(rel):
            return None
        if ".git" in rel.split(os.sep):
            return None  # never recorded: the full look decides what the call did
        found.append(Path(rel).as_posix())
    return found
