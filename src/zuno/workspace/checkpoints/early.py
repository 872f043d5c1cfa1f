"""The first call of a session, while the workspace's first full look still runs.

At session start the first full look (every file stat'ed, new ones hashed)
runs in the background (:meth:`zuno.workspace.checkpoints.store.Checkpoints.prepare`): at
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
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from zuno.workspace.checkpoints.fast import Found

__all__ = ["EarlyCall", "EarlyCalls", "EarlySnapshot", "before_each", "plain_paths"]


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


class EarlyCalls:
    """The calls recorded while the look runs, in order, and their checkpoints once written.

    Shared by the look's thread and the calls' threads (one lock).
    """

    def __init__(self, limit: int) -> None:
        """At most ``limit`` calls are recorded; later ones wait for the look."""
        self._lock = threading.Lock()
        self._limit = limit
        self._calls: list[EarlyCall] = []
        self._over = False
        self._done: list[EarlySnapshot] = []

    @property
    def over(self) -> bool:
        """Whether the look has ended (no call is recorded early any more)."""
        return self._over

    def room(self) -> bool:
        """Whether one more call may be recorded."""
        return not self._over and len(self._calls) < self._limit

    def paths(self) -> list[str]:
        """Every path the calls recorded so far change."""
        with self._lock:
            return list({p: None for call in self._calls for p in call.entries})

    def add(self, call: EarlyCall) -> bool:
        """Record ``call``; False when the look has just ended (then it need not wait)."""
        with self._lock:
            if self._over or len(self._calls) >= self._limit:
                return False
            self._calls.append(call)
            return True

    def end(self) -> list[EarlyCall]:
        """The look has ended: the calls waiting for their checkpoints, in order."""
        with self._lock:
            self._over = True
            calls, self._calls = self._calls, []
        return calls

    def settle(self, snapshot: EarlySnapshot) -> None:
        """Keep a written (or failed) checkpoint for :meth:`drain`."""
        with self._lock:
            self._done.append(snapshot)

    def drain(self) -> list[EarlySnapshot]:
        """The checkpoints written since last asked."""
        with self._lock:
            done, self._done = self._done, []
        return done


def before_each(calls: Sequence[EarlyCall]) -> list[dict[str, Found]]:
    """For each call, every path of every call as it was just before that call.

    A path a later call read first was, before this call, as that call read it
    (nothing else changed it meanwhile; the calls are exclusive).
    """
    found: list[dict[str, Found]] = []
    for k, call in enumerate(calls):
        before = {p: e for later in reversed(calls[k + 1 :]) for p, e in later.entries.items()}
        before.update(call.entries)
        found.append(before)
    return found


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
