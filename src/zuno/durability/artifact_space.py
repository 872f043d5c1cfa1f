"""The disk the artifacts take: one session's total cap, and pruning old sessions.

Each stream's artifact is capped on its own (``tool_output.artifact_max_bytes``),
but a session running many commands kept every one. Two bounds:

* :func:`trim_session`: after a call kept artifacts, a session whose artifacts
  together pass ``tool_output.session_artifacts_max_bytes`` loses its oldest ones
  first (never those of the call that just ran), and that call's result names
  what went.
* :func:`plan_prune`: what ``zuno gc`` removes: the artifacts (and background
  job logs) of sessions idle for longer than some days, then of the oldest
  sessions until all of them fit a size, and the checkpoint store of a workspace
  none of whose sessions is left. A session that is running (held by a live
  worker) or queued is never touched, nor is its workspace's checkpoint store.

The store's rows stay: transcripts are history. A result naming a removed
artifact then names a file that is gone, which ``read`` says plainly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from zuno.contract.output import format_size

if TYPE_CHECKING:
    from zuno.durability.store import Store

__all__ = [
    "PrunePlan",
    "Removal",
    "folder_size",
    "plan_prune",
    "removal_notice",
    "trim_session",
]

_NAMED_IN_NOTICE = 5
"""Removed artifacts named one by one in a result; the rest are counted."""


@dataclass(frozen=True, slots=True)
class Removal:
    """One file or folder removed (or to be removed), and how many bytes it held."""

    path: Path
    size: int
    why: str = ""
    sessions: tuple[str, ...] = ()
    """The sessions that must still be idle when it is removed."""


def folder_size(path: Path) -> int:
    """Bytes of the files under path (0 when it is gone); symlinks are not followed."""
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    total += folder_size(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_size
    return total


def trim_session(
    folder: Path, cap: int, keep: Iterable[Path], *, newer_than: float
) -> list[Removal]:
    """Remove a session's oldest artifacts until they fit ``cap`` bytes together.

    Args:
        folder: The session's artifact folder.
        cap: The most its artifacts may hold together.
        keep: The artifacts of the call that just ran: never removed.
        newer_than: Files changed after this time (seconds since the epoch) are
            being written by a call still running and are kept too.

    Returns:
        What was removed, oldest first.
    """
    kept = {os.path.abspath(p) for p in keep}
    files: list[tuple[float, int, Path]] = []
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            with contextlib.suppress(OSError):
                if not entry.is_file(follow_symlinks=False):
                    continue
                stat = entry.stat(follow_symlinks=False)
                total += stat.st_size
                if entry.path not in kept and stat.st_mtime <= newer_than:
                    files.append((stat.st_mtime, stat.st_size, Path(entry.path)))
    removed: list[Removal] = []
    for _, size, path in sorted(files, key=lambda f: (f[0], f[2].name)):
        if total <= cap:
            break
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            continue
        total -= size
        removed.append(Removal(path, size))
    return removed


def removal_notice(removed: list[Removal], cap: int) -> str:
    """The line a result carries when the session's cap removed older artifacts."""
    named = ", ".join(f"{r.path.name} ({format_size(r.size)})" for r in removed[:_NAMED_IN_NOTICE])
    more = len(removed) - _NAMED_IN_NOTICE
    if more > 0:
        named += f" and {more} more"
    freed = format_size(sum(r.size for r in removed))
    return (
        f"[this session's artifacts passed {format_size(cap)} "
        "(tool_output.session_artifacts_max_bytes): the oldest were removed to make room, "
        f"{freed} in all: {named}]"
    )


@dataclass
class PrunePlan:
    """What ``zuno gc`` removes, and what it leaves because it is in use."""

    removals: list[Removal] = field(default_factory=lambda: [])
    kept_busy: list[str] = field(default_factory=lambda: [])
    """Sessions left alone because a live worker holds them or they are queued."""

    @property
    def total(self) -> int:
        """Bytes freed."""
        return sum(r.size for r in self.removals)

    def apply(self, store: Store) -> list[Removal]:
        """Remove everything planned; returns what could not be removed.

        Each session is looked at again just before its files go: one that a
        process took up since the plan was made is left alone (and listed in
        :attr:`kept_busy`).
        """
        failed: list[Removal] = []
        for removal in list(self.removals):
            taken = [sid for sid in removal.sessions if _busy_now(store, sid)]
            if taken:
                self.removals.remove(removal)
                self.kept_busy += [sid for sid in taken if sid not in self.kept_busy]
                continue
            try:
                if removal.path.is_dir() and not removal.path.is_symlink():
                    shutil.rmtree(removal.path)
                else:
                    removal.path.unlink()
            except FileNotFoundError:
                pass
            except OSError:
                failed.append(removal)
        return failed


@dataclass
class _Session:
    session_id: str
    workspace: str
    active: float
    """The last sign of activity: the session's row, or its newest artifact."""
    busy: bool
    files: list[Path]
    size: int


def _busy(store: Store, state: object, owner: object) -> bool:
    """Whether a session is queued, or running in a process that is alive."""
    from zuno.durability.workers import runner_settleable

    holder = None if owner is None else str(owner)
    return state == "queued" or (state == "running" and not runner_settleable(store, holder))


def _busy_now(store: Store, session_id: str) -> bool:
    rows = store.query("SELECT state, owner FROM sessions WHERE session_id = ?", (session_id,))
    return bool(rows) and _busy(store, rows[0][0], rows[0][1])


def _sessions(store: Store, root: Path) -> list[_Session]:
    jobs: dict[str, list[Path]] = {}
    if store.has_table("jobs"):  # made with the first background job
        for session_id, output_path in store.query("SELECT session_id, output_path FROM jobs"):
            jobs.setdefault(str(session_id), []).append(Path(str(output_path)))
    found: list[_Session] = []
    rows = store.query(
        "SELECT session_id, workspace, created_at, updated_at, owner, state FROM sessions"
    )
    for session_id, workspace, created, updated, owner, state in rows:
        sid = str(session_id)
        busy = _busy(store, state, owner)
        files = [p for p in [root / sid, *jobs.get(sid, [])] if p.exists()]
        active = max(float(created or 0), float(updated or 0))
        size = 0
        for path in files:
            with contextlib.suppress(OSError):
                active = max(active, path.stat().st_mtime)
            size += folder_size(path) if path.is_dir() else _file_size(path)
        found.append(_Session(sid, str(workspace), active, busy, files, size))
    return found


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def plan_prune(
    store: Store,
    *,
    now: float,
    older_than_days: float | None,
    max_bytes: int | None,
) -> PrunePlan:
    """What to remove so no idle session is older than the days and all fit max_bytes.

    Args:
        store: The store whose artifacts folder is pruned.
        now: The current time (seconds since the epoch).
        older_than_days: Remove the artifacts of sessions idle for longer; None: by size only.
        max_bytes: Then remove the oldest sessions' artifacts until the rest fit; None: no bound.
    """
    from zuno.workspace.checkpoints.store import checkpoints_of_store

    root = store.artifacts_root
    plan = PrunePlan()
    sessions = sorted(_sessions(store, root), key=lambda s: s.active)
    plan.kept_busy = [s.session_id for s in sessions if s.busy and s.files]
    going: set[str] = set()
    cutoff = None if older_than_days is None else now - older_than_days * 86400
    for session in sessions:
        if session.busy or not session.files:
            continue
        if cutoff is not None and session.active < cutoff:
            going.add(session.session_id)
    if max_bytes is not None:
        left = sum(s.size for s in sessions if s.session_id not in going)
        for session in sessions:  # oldest first
            if left <= max_bytes:
                break
            if session.busy or not session.files or session.session_id in going:
                continue
            going.add(session.session_id)
            left -= session.size
    for session in sessions:
        if session.session_id in going:
            why = f"session {session.session_id}"
            plan.removals += [
                Removal(
                    p, folder_size(p) if p.is_dir() else _file_size(p), why, (session.session_id,)
                )
                for p in session.files
            ]
    # A workspace's checkpoints serve undo in all its sessions: they go with the last one.
    by_workspace: dict[str, list[_Session]] = {}
    for session in sessions:
        by_workspace.setdefault(session.workspace, []).append(session)
    for workspace, members in sorted(by_workspace.items()):
        if cutoff is None or any(s.busy or s.active >= cutoff for s in members):
            continue
        git_dir = checkpoints_of_store(store, Path(workspace)).git_dir
        if git_dir.exists():
            plan.removals.append(
                Removal(
                    git_dir,
                    folder_size(git_dir),
                    f"checkpoints of {workspace}",
                    tuple(s.session_id for s in members),
                )
            )
    return plan
