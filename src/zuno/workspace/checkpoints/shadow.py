"""The shadow store of one workspace: where it lives, how git runs on it, what it leaves out.

A :class:`ShadowStore` is the part of :class:`~zuno.workspace.checkpoints.store.Checkpoints`
that knows the git folder itself: its place under the store's data folder
(one per workspace, named after the workspace's real path), the file lock that
keeps processes apart, running git plumbing on it (:mod:`zuno.workspace.checkpoints.git`),
creating it on first use and recreating one changed behind Zuno's back, and
what it never records: Zuno's own files inside the workspace and the paths a
deny rule keeps from ``read`` (remembered in the store, so an object made
without them still honours them).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import subprocess
import threading
from collections.abc import Generator, Sequence
from pathlib import Path

from zuno.workspace.checkpoints.git import (
    HEAD_REF,
    create_store,
    first_line,
    git_output,
    run_git,
    store_is_intact,
    store_layout,
    upgrade_earlier,
    write_private,
)
from zuno.workspace.checkpoints.objects import ObjectStore, large_file_limit
from zuno.workspace.checkpoints.privacy import DeniedPaths
from zuno.workspace.checkpoints.types import CheckpointError

__all__ = ["DENIED_FILE", "ShadowStore"]

_log = logging.getLogger("zuno.workspace.checkpoints.store")

DENIED_FILE = "zuno-denied"
"""The file in the git folder holding the deny patterns the store was last told of."""


class ShadowStore:
    """The git folder of one workspace's checkpoints (created on first use)."""

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
        self.workspace = Path(os.path.realpath(workspace))
        key = hashlib.sha256(os.fsencode(self.workspace)).hexdigest()[:16]
        name = re.sub(r"[^A-Za-z0-9._-]", "_", self.workspace.name)[:40] or "root"
        self.git_dir = Path(os.path.abspath(root)) / f"{name}-{key}.git"
        self._lock_path = self.git_dir.with_suffix(".lock")
        self._exclude = [Path(os.path.abspath(p)) for p in exclude]
        self._denied_given = None if denied is None else DeniedPaths.of(denied)
        self._denied = self._denied_given or DeniedPaths(())
        self._objects = ObjectStore(self.git_dir)
        self._large = large_file_limit()
        self._stand_ins: dict[tuple[int, int, int, int], str] = {}
        self._ready = False
        self._thread_lock = threading.RLock()
        self._own: tuple[str, ...] | None = None  # Zuno's files in the workspace

    def _ensure(self) -> None:
        """Create the shadow store on first use; recreate one changed behind Zuno's back.

        A store whose config, attributes, HEAD or hooks are not what Zuno wrote
        may make git run code (a ``core.fsmonitor``, a hook): it is removed and
        created again, empty (its earlier checkpoints are lost, said in the log).
        """
        layout = store_layout(self.workspace)
        if self._ready and not (self.git_dir / "HEAD").is_file():
            self._ready = False  # removed under us: made again, and looked at in full
            self._forget_watch()
        if not self._ready:
            upgrade_earlier(self.git_dir, layout)
        if (self.git_dir / "HEAD").is_file() and not store_is_intact(self.git_dir, layout):
            _log.warning(
                "zuno: the checkpoint store %s was changed by something other than Zuno; "
                "it is recreated (earlier checkpoints of this workspace are gone)",
                self.git_dir,
            )
            self._ready = False
            self._forget_watch()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.git_dir / "HEAD")
        if self._ready:
            return
        if not (self.git_dir / "HEAD").is_file():
            try:
                create_store(self.git_dir, layout)
            except subprocess.CalledProcessError as exc:
                raise CheckpointError(f"git init failed: {first_line(exc.stderr)}") from exc
            except FileNotFoundError as exc:
                raise CheckpointError("git is not installed (checkpoints need it)") from exc
            self._objects = ObjectStore(self.git_dir)
        exclude = self.git_dir / "info" / "exclude"
        lines = self._exclude_lines()
        with contextlib.suppress(OSError):
            if exclude.read_text() == lines:
                lines = ""  # unchanged: rewriting it would void the untracked cache
        if lines:
            write_private(exclude, lines)
        self._remember_denied()
        self._ready = True

    def _remember_denied(self) -> None:
        """Keep the deny patterns in the store (an object made without them uses them)."""
        path = self.git_dir / DENIED_FILE
        given = self._denied_given
        if given is None:
            with contextlib.suppress(OSError):
                text = path.read_text()
                self._denied = DeniedPaths.of([ln for ln in text.split("\n") if ln])
            return
        text = "".join(f"{p}\n" for p in given.patterns)
        with contextlib.suppress(OSError):
            if path.read_text() == text:
                return
        if text or path.exists():
            write_private(path, text)
            self._forget_watch()  # what is left out changed: the next look is a full one

    def _exclude_lines(self) -> str:
        """Zuno's own files, when they lie inside the workspace, anchored at its root."""
        lines = ["# Zuno's own files inside the workspace: never snapshot or restore them"]
        lines += ["/" + re.sub(r"([*?\[\\!#])", r"\\\1", rel) for rel in self._own_paths()]
        return "\n".join(lines) + "\n"

    def _own_paths(self) -> list[str]:
        """Zuno's own files inside the workspace, relative to it (a store's journal files too)."""
        found: list[str] = []
        for path in [self.git_dir, self._lock_path, *self._exclude]:
            real = Path(os.path.realpath(path))
            if real != self.workspace and self.workspace in real.parents:
                rel = real.relative_to(self.workspace).as_posix()
                found.append(rel)
                if path.suffix == ".db":
                    found += [f"{rel}-wal", f"{rel}-shm", f"{rel}-journal"]
        return found

    def _not_own(self, paths: list[str]) -> list[str]:
        """``paths`` without Zuno's own files: a store inside the workspace writes its
        journal on every call, and reading it only to have the ignore rules drop it
        would cost a copy of it and a git process per snapshot."""
        if self._own is None:
            self._own = tuple(self._own_paths())
        own = self._own
        if not own:
            return paths
        return [p for p in paths if not any(p == o or p.startswith(o + "/") for o in own)]

    def _head(self) -> str | None:
        ref = self.git_dir / HEAD_REF
        with contextlib.suppress(OSError):
            text = ref.read_text().strip()
            if text:
                return text
        if not os.path.lexists(self.git_dir / "packed-refs"):
            return None  # refs are never packed here: no file, no chain yet
        proc = self._run("rev-parse", "--quiet", "--verify", HEAD_REF)
        return proc.stdout.strip() or None if proc.returncode == 0 else None

    def _run(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return run_git(self.git_dir, self.workspace, *args, input=input)

    def _git(self, *args: str, input: str | None = None) -> str:
        return git_output(self.git_dir, self.workspace, *args, input=input)

    @contextlib.contextmanager
    def _locked(self) -> Generator[None]:
        """One process at a time per workspace: the index and the chain's head are shared.

        Within a process, one thread at a time too (the background first look).
        """
        with self._thread_lock:
            self._lock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with contextlib.suppress(OSError):
                os.chmod(self._lock_path.parent, 0o700)
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)

    def _forget_watch(self) -> None:
        """Drop what is known of the workspace since the last look (the next is a full one).

        The store knows nothing of the kind; :class:`Checkpoints` does.
        """

    def _ignored(self, paths: list[str]) -> set[str]:
        """Which of ``paths`` (new to the tree) the ignore rules leave out."""
        proc = self._run(
            "check-ignore", "--no-index", "-z", "--stdin", input="".join(p + "\0" for p in paths)
        )
        if proc.returncode not in (0, 1):
            raise CheckpointError(f"git check-ignore failed: {first_line(proc.stderr)}")
        return {p for p in proc.stdout.split("\0") if p}
