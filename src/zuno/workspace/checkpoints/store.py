"""Checkpoints: the workspace's state before every side-effecting call, in a shadow git store.

Before a side-effecting call runs (a file tool, ``shell``, ``execute``, ``bg``,
any tool so declared), the dispatcher records the workspace as a commit in a
git repository of Zuno's own, never the user's: one git folder per workspace
under the store's data folder (``<artifacts>/checkpoints/<name>-<hash>.git``).
Git plumbing runs with that folder as ``GIT_DIR``, the workspace as
``GIT_WORK_TREE`` and a private index, so a snapshot after a small change
costs a stat of each file (the index and the untracked cache remember the
rest), not a copy of the tree.

After its first full snapshot, a :class:`Checkpoints` object watches the
workspace's folders with inotify (:mod:`zuno.workspace.watch`), and the next
snapshots look only at the paths reported changed (``git status`` limited to
them, so ignore rules, nested repositories and removed folders are handled as
in a full look) instead of stat'ing every file. The full look comes back
whenever an event may have been missed (queue overflow, watch limit, the
workspace folder removed, a fork, any error), when the index or the chain's
head was changed by someone else (another process), and when a ``.gitignore``
changed (what is ignored may have changed anywhere).

What a snapshot holds: every file and symlink of the workspace (content, the
executable bit, the link text), except folders named ``.git`` (the user's
repository is never read as content nor written), what ``.gitignore`` files
ignore, and Zuno's own store when it lies inside the workspace. Empty folders
are not recorded (git records files). Nested repositories are kept as a
reference to their commit, not their files, and are never restored.

The user's configuration of git is not read (no global or system config, no
hooks, no filters): the shadow store sees the exact bytes, and checkouts write
them back byte for byte.

Snapshots form one chain per workspace, in the order they were taken (a file
lock keeps processes apart). What a call changed is the difference between the
snapshot before it and the next snapshot in the chain, or the current state
when it is the last: shell effects on workspace files included.

This module takes the snapshots (:class:`Checkpoints`). The store itself
(where it lives, running git, what it leaves out) is
:mod:`zuno.workspace.checkpoints.shadow`; reading, comparing and restoring the
chain is :mod:`zuno.workspace.checkpoints.chain`; the full look over the
workspace is :mod:`zuno.workspace.checkpoints.full_look`.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath

from zuno.workspace.checkpoints.chain import CheckpointChain
from zuno.workspace.checkpoints.early import (
    EarlyCall,
    EarlyCalls,
    EarlySnapshot,
    before_each,
    plain_paths,
)
from zuno.workspace.checkpoints.fast import changed_entries, entries_to_set, read_entries
from zuno.workspace.checkpoints.full_look import PENDING_FILE, FullLook
from zuno.workspace.checkpoints.git import HEAD_REF, move_ref
from zuno.workspace.checkpoints.objects import EditConflict
from zuno.workspace.checkpoints.privacy import denied_patterns
from zuno.workspace.checkpoints.types import Change, CheckpointError, Entry, Restored, Snapshot
from zuno.workspace.watch import FolderWatch

__all__ = [
    "CHECKPOINTS_ENV",
    "Change",
    "CheckpointError",
    "Checkpoints",
    "EarlySnapshot",
    "Entry",
    "Restored",
    "Snapshot",
    "checkpoints_enabled",
    "checkpoints_for",
    "checkpoints_of_store",
    "denied_patterns",
]

CHECKPOINTS_ENV = "ZUNO_CHECKPOINTS"
"""Set to ``off`` (or ``0``, ``false``) to take no checkpoints; calls then cannot be undone."""

_log = logging.getLogger("zuno.workspace.checkpoints.store")

_QUICK_PATHS = 64  # take_quick: at most this many changed paths
_QUICK_BYTES = 1 << 20  # and this many bytes to read
_EARLY_CALLS = 16  # file calls recorded while the first look runs; later ones wait
_EARLY_BYTES = 64 << 20  # and the bytes of their paths, read again before each
_EARLY_WAIT = 10.0  # seconds an early call waits for the look's store


def checkpoints_enabled() -> bool:
    """Whether checkpoints are taken (``ZUNO_CHECKPOINTS=off`` turns them off)."""
    value = os.environ.get(CHECKPOINTS_ENV, "").strip().lower()
    return value not in ("off", "0", "false", "no")


def checkpoints_for(
    artifacts_root: Path,
    workspace: Path,
    *,
    also_exclude: Sequence[Path] = (),
    denied: Sequence[str] | None = None,
) -> Checkpoints:
    """The checkpoints of ``workspace``, kept beside a store's artifacts.

    Args:
        artifacts_root: The store's artifacts folder; the shadow stores live in
            its ``checkpoints`` folder (per store, like the artifacts).
        workspace: The workspace folder.
        also_exclude: Further paths never to snapshot or restore (a store file
            kept inside the workspace).
        denied: Path patterns of the deny rules on ``read`` (:func:`denied_patterns`):
            never read into the store nor shown. None: those the store last recorded.
    """
    root = artifacts_root / "checkpoints"
    return Checkpoints(root, workspace, exclude=[artifacts_root, *also_exclude], denied=denied)


def checkpoints_of_store(
    store: object, workspace: Path, *, denied: Sequence[str] | None = None
) -> Checkpoints:
    """The checkpoints of ``workspace`` for a store (its artifacts folder, its file left out)."""
    artifacts_root: Path = getattr(store, "artifacts_root")  # noqa: B009 (any store type)
    path = getattr(store, "path", None)
    return checkpoints_for(
        artifacts_root,
        workspace,
        also_exclude=[path] if isinstance(path, Path) else [],
        denied=denied,
    )


class Checkpoints(FullLook, CheckpointChain):
    """The shadow git store of one workspace (created on first use): taking snapshots.

    What the store is and how it runs git: :class:`ShadowStore`; reading and
    comparing the chain: :class:`CheckpointChain`; the full look: :class:`FullLook`.
    """

    def __init__(
        self,
        root: Path,
        workspace: Path,
        *,
        exclude: Sequence[Path] = (),
        denied: Sequence[str] | None = None,
    ) -> None:
        """Find (not yet create) the shadow store of ``workspace`` under ``root``.

        Args:
            root: The folder holding every workspace's shadow store.
            workspace: The workspace.
            exclude: Paths never to snapshot (those inside the workspace matter).
            denied: Path patterns never read nor shown (deny rules on ``read``);
                None: the ones the store recorded last.
        """
        super().__init__(root, workspace, exclude=exclude, denied=denied)
        self._watch: FolderWatch | None = None
        # What the index file and the chain's head were after this object's last
        # snapshot: if either differs, another process wrote them, and only a full
        # look is exact. The tree is that of the last look (full or watched).
        self._index_seen: tuple[int, int, int] | None = None
        self._head_seen: str | None = None
        self._tree: str | None = None
        self._carry: list[str] = []  # drained by take_quick, left for take
        self._preparing: threading.Thread | None = None
        # File calls recorded while the background look runs (checkpoint_early).
        self._early = EarlyCalls(_EARLY_CALLS)
        self.on_early: Callable[[EarlySnapshot], None] | None = None
        """Called from the look's thread with each early checkpoint once written
        (its call's row can name it at once); :meth:`early_snapshots` has them too."""
        self._reading = threading.Event()  # a look has its store ready

    # Taking snapshots -------------------------------------------------------------

    def prepare(self) -> None:
        """Take the first full look in the background (at session start).

        The watch starts and the index is brought up to the workspace, so the
        first side-effecting call pays only for what changed since. A call
        arriving earlier waits for it (the lock), unless it is a file tool's
        (:meth:`take_early`); a failure is left to that call.
        """
        if self._preparing is not None:
            return

        def look() -> None:
            failure = "the first look did not finish"
            try:
                with self._locked():
                    # After a snapshot taken meanwhile, this is the watched path: cheap.
                    tree, unreadable = self._write_tree(start_watch=True)
                    self._commit_early(self._early.end(), tree, unreadable)
                    return
            except Exception as exc:  # the calls recorded early must hear of it
                failure = str(exc) or type(exc).__name__
                if not isinstance(exc, (CheckpointError, OSError)):
                    _log.exception("zuno: the first checkpoint look failed")
            finally:
                self._reading.set()  # no early call waits for a look that is over
            for early in self._early.end():
                _log.warning("zuno: no checkpoint before %s: %s", early.call_id, failure)
                self._early.settle(early.settled(None, reason=failure))

        self._preparing = threading.Thread(target=look, name="zuno-checkpoints", daemon=True)
        self._preparing.start()

    def take(self, *, call_id: str, tool: str, session_id: str) -> Snapshot:
        """Record the workspace as it is now, as the next commit of the chain.

        Raises:
            CheckpointError: git is missing or failed; nothing was recorded.
        """
        message = _message(call_id, tool, session_id)
        try:
            with self._locked():
                tree, unreadable = self._write_tree(start_watch=True)
                return Snapshot(self._commit(tree, message), unreadable)
        except OSError as exc:
            raise CheckpointError(f"cannot use the checkpoint store {self.git_dir}: {exc}") from exc

    def take_quick(self, *, call_id: str, tool: str, session_id: str) -> Snapshot | None:
        """:meth:`take`, when it can be done at once and small: else None (call :meth:`take`).

        At once: no other thread or process holds the store, the watch names the
        changed paths, and they are few and small (a bounded read). Meant for an
        event loop, which it blocks for about a millisecond instead of handing
        the snapshot to a worker thread; what it leaves is kept for :meth:`take`.

        Raises:
            CheckpointError: The store cannot be used; nothing was recorded.
        """
        if self._watch is None or self._tree is None or self._index_seen is None:
            return None
        if not self._thread_lock.acquire(blocking=False):
            return None
        try:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            try:
                return self._quick(_message(call_id, tool, session_id))
            finally:
                os.close(fd)
        except OSError as exc:
            raise CheckpointError(f"cannot use the checkpoint store {self.git_dir}: {exc}") from exc
        finally:
            self._thread_lock.release()

    def _quick(self, message: str) -> Snapshot | None:
        self._ensure()
        seen = self._index_seen
        paths = self._watched_paths()
        if paths is None:
            return None  # the full look is due: take() does it
        if len(paths) > _QUICK_PATHS or _bytes_of(self.workspace, paths) > _QUICK_BYTES:
            self._carry, self._index_seen = paths, seen  # for take(), in a thread
            return None
        tree = self._tree
        assert tree is not None
        try:
            if paths:
                tree = self._watched_tree(tree, paths)
        except (EditConflict, CheckpointError) as exc:
            _log.info("the watched paths need the full look: %s", exc)
            return None  # take() looks at everything (the watch's paths are spent)
        self._index_seen = self._index_stamp()
        self._head_seen = self._head()
        self._tree = tree
        return Snapshot(self._commit(tree, message))

    def looking(self) -> bool:
        """Whether the background first look (:meth:`prepare`) is still running."""
        preparing = self._preparing
        return preparing is not None and preparing.is_alive() and not self._early.over

    def take_early(
        self, *, call_id: str, attempt: int, tool: str, session_id: str, paths: Sequence[str]
    ) -> bool:
        """Record a file tool's checkpoint without waiting for the background look.

        While :meth:`prepare`'s look runs, the pre-images of ``paths`` (the only
        paths the call changes) are copied into the store now; the commit is
        written when the look ends (:meth:`early_snapshots`). See
        :mod:`zuno.workspace.checkpoints.early`.

        Returns:
            True when recorded (the call may run at once); False when the call
            must take its checkpoint with :meth:`take` (no look running, one call
            already recorded this way, a path not plainly inside the workspace).
        """
        # A call right after the session started: the store first.
        if not self.looking() or not self._reading.wait(_EARLY_WAIT):
            return False
        if not self._ready or not self._early.room():
            return False
        rel = plain_paths(self.workspace, paths)
        if rel is None:
            return False
        # Each early checkpoint holds every path the early calls so far changed, as
        # it is now: the look may have read any of them before or after a change.
        changed = list(dict.fromkeys([*self._early.paths(), *rel]))
        if _bytes_of(self.workspace, changed) > _EARLY_BYTES:
            return False
        try:
            entries = read_entries(
                self.workspace, self._objects, changed, denied=self._denied, large=self._large
            )
        except (EditConflict, OSError) as exc:
            _log.info("the early checkpoint waits for the look: %s", exc)
            return False
        message = _message(call_id, tool, session_id)
        # False: the look has just ended, and take() is quick now.
        return self._early.add(EarlyCall(call_id, attempt, tool, session_id, message, entries))

    def early_snapshots(self) -> list[EarlySnapshot]:
        """The checkpoints of early calls written since last asked (see :meth:`take_early`)."""
        return self._early.drain()

    def _commit_early(self, calls: list[EarlyCall], tree: str, unreadable: tuple[str, ...]) -> None:
        """Each early call's checkpoint, in order: the look's tree with the paths the early
        calls change set to what they were before that call."""
        if not calls:
            return
        last = tree
        for early, before in zip(calls, before_each(calls), strict=True):
            try:
                found = entries_to_set(
                    self.workspace, self._objects, tree, before, ignored=self._ignored
                )
                last = self._objects.edit(tree, found) if found else tree
                commit = self._commit(last, early.message)
            except (EditConflict, CheckpointError, OSError) as exc:
                _log.warning("zuno: no checkpoint before %s: %s", early.call_id, exc)
                self._early.settle(early.settled(None, reason=str(exc)))
                continue
            settled = early.settled(commit, unreadable=unreadable)
            self._early.settle(settled)
            if self.on_early is not None:
                try:
                    self.on_early(settled)
                except Exception:  # the owner settles it again (early_snapshots)
                    _log.exception("zuno: recording the checkpoint of %s", early.call_id)
        paths = sorted({p for early in calls for p in early.entries})
        # The next snapshot reads these paths again, whether or not the watch (started
        # by the look, perhaps after a call's write) reported them; it starts from the
        # last early tree, whose entries for them the index lacks: the next full look
        # folds them in.
        self._carry = sorted({*self._carry, *paths})
        if last != tree:
            self._tree = last if self._tree is not None else None
        with open(self.git_dir / PENDING_FILE, "ab", opener=_private_opener) as out:
            out.write(b"".join(os.fsencode(p) + b"\0" for p in paths))

    def _commit(self, tree: str, message: str) -> str:
        """Write the commit and move the chain's head to it (under the lock)."""
        parent = self._head()
        stamp = f"Zuno <checkpoints@zuno.invalid> {int(time.time())} +0000"
        body = f"tree {tree}\n"
        if parent:
            body += f"parent {parent}\n"
        body += f"author {stamp}\ncommitter {stamp}\n\n{message}"
        commit = self._objects.write("commit", body.encode("utf-8", "surrogateescape"))
        move_ref(self.git_dir / HEAD_REF, commit)
        if self._index_seen is not None:
            self._head_seen = commit
        return commit

    def current_tree(self) -> str:
        """The tree of the workspace as it is now (written to the store, not committed).

        It uses the folder watch that snapshots started, but starts none (a
        one-off comparison would pay for watching every folder in vain).
        """
        try:
            with self._locked():
                tree, _ = self._write_tree(start_watch=False)
        except OSError as exc:
            raise CheckpointError(f"cannot use the checkpoint store {self.git_dir}: {exc}") from exc
        return tree

    def close(self) -> None:
        """Stop watching the workspace (the next snapshot looks at every file)."""
        if self._preparing is not None:
            self._preparing.join()
        self._forget_watch()

    def _forget_watch(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
        self._index_seen = None
        self._head_seen = None
        self._tree = None
        self._carry = []

    def _index_stamp(self) -> tuple[int, int, int] | None:
        with contextlib.suppress(OSError):
            st = os.stat(self.git_dir / "index")
            return (st.st_ino, st.st_mtime_ns, st.st_size)
        return None

    def _watched_paths(self) -> list[str] | None:
        """The paths changed since this object's last snapshot, or None: look at all."""
        watch = self._watch
        if watch is None or self._index_seen is None:
            return None
        # Whatever happens next, the drained events are gone: until this snapshot
        # succeeds, the next one must look at everything.
        index_seen, head_seen = self._index_seen, self._head_seen
        self._index_seen = None
        paths = watch.drain()
        if paths is None:
            return None
        paths = self._not_own(paths)
        if self._carry:
            paths = sorted({*self._carry, *paths})
            self._carry = []
        if index_seen != self._index_stamp() or head_seen != self._head():
            return None  # another process wrote the index or the chain
        if any(PurePosixPath(p).name == ".gitignore" for p in paths):
            return None  # what is ignored may have changed anywhere
        return paths

    def _write_tree(self, *, start_watch: bool) -> tuple[str, tuple[str, ...]]:
        """The tree of the workspace as it is now, written to the store.

        With the folder watch naming the changed paths, the previous tree plus
        those paths, in Python (:mod:`zuno.workspace.checkpoints.fast`); the paths it put in
        the tree but not in git's index are kept in a file, for the next full look.
        Otherwise (the first look, a lost event, something only git can tell) the
        full look: ``git status`` stats each known file (the index remembers
        the rest) and, with the untracked cache, reads only the folders whose
        own stat changed; only those paths are hashed again.
        """
        self._ensure()
        # The store is there: a file call may record its pre-images (take_early). The
        # watch need not have started: its paths are read again at the next snapshot.
        self._reading.set()
        paths = self._watched_paths()
        tree = self._tree
        if paths is not None and tree is not None:
            with contextlib.suppress(EditConflict, CheckpointError):
                if paths:
                    tree = self._watched_tree(tree, paths)
                self._index_seen = self._index_stamp()
                self._head_seen = self._head()
                self._tree = tree
                return tree, ()
            _log.info("the watched paths need the full look: %s", ", ".join(paths[:5]))
        start_watch = start_watch or self._watch is not None
        self._forget_watch()
        if start_watch:
            # Watch before looking, so a change made during the full look is
            # reported next time (at worst twice, which is harmless).
            self._watch = FolderWatch.start(
                self.workspace, skip=[self.git_dir, self._lock_path, *self._exclude]
            )
        unreadable = self._update_index()
        tree = self._git("write-tree").strip()
        # A file left out stays out of the watched paths once reported: look at all
        # next time, as a full look would name it again.
        if self._watch is not None and not unreadable:
            self._index_seen = self._index_stamp()
            self._head_seen = self._head()
            self._tree = tree
        return tree, unreadable

    def _watched_tree(self, tree: str, paths: list[str]) -> str:
        """The previous tree plus the watched paths (raises EditConflict: full look)."""
        found = changed_entries(
            self.workspace,
            self._objects,
            tree,
            paths,
            denied=self._denied,
            large=self._large,
            ignored=self._ignored,
        )
        if not found:
            return tree
        new = self._objects.edit(tree, found)
        pending = self.git_dir / PENDING_FILE
        with open(pending, "ab", opener=_private_opener) as out:
            out.write(b"".join(os.fsencode(p) + b"\0" for p in found))
        return new


def _message(call_id: str, tool: str, session_id: str) -> str:
    return (
        f"before {tool} ({call_id})\n\n"
        f"Zuno-Call: {call_id}\nZuno-Tool: {tool}\nZuno-Session: {session_id}\n"
    )


def _bytes_of(workspace: Path, paths: list[str]) -> int:
    """How many bytes reading ``paths`` would take (folders count as too many)."""
    total = 0
    for path in paths:
        try:
            st = os.lstat(workspace / path)
        except OSError:
            continue
        total += st.st_size if not stat.S_ISDIR(st.st_mode) else _QUICK_BYTES + 1
    return total


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_CLOEXEC, 0o600)
