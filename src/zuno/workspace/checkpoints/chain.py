"""Reading a workspace's chain of checkpoints: what it holds, how two differ, restoring.

The read side of :class:`~zuno.workspace.checkpoints.store.Checkpoints`: the
newest snapshot and the one after a given one, the recent history with the
call each was taken before (the commit's trailers), the differences between
two snapshots (as changes or as a unified diff, denied paths left out), and
restoring paths from a snapshot's entries (:mod:`zuno.workspace.checkpoints.restore`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping

from zuno.workspace.checkpoints.git import HEAD_REF, read_blobs
from zuno.workspace.checkpoints.privacy import DeniedPaths
from zuno.workspace.checkpoints.restore import restore as restore_paths
from zuno.workspace.checkpoints.shadow import DENIED_FILE, ShadowStore
from zuno.workspace.checkpoints.types import Change, CheckpointError, Entry, Restored

__all__ = ["CheckpointChain"]

_TRAILER = re.compile(r"^Zuno-(Call|Tool|Session): (.+)$", re.MULTILINE)


class CheckpointChain(ShadowStore):
    """Reading, comparing and restoring the snapshots of one workspace's chain."""

    def head(self) -> str | None:
        """The newest snapshot of this workspace, or None before the first."""
        if not (self.git_dir / "HEAD").is_file():
            return None
        with self._locked():
            return self._head()

    def next_after(self, commit: str) -> str | None:
        """The snapshot taken right after ``commit`` in this workspace (None: it is the last)."""
        self._require(commit)
        out = self._git("rev-list", "--reverse", "--ancestry-path", f"{commit}..{HEAD_REF}")
        first = out.split("\n", 1)[0].strip()
        return first or None

    def history(self, limit: int) -> list[tuple[str, str, str | None]]:
        """The newest ``limit`` snapshots, newest first: ``(commit, tree, call id)`` each."""
        if not (self.git_dir / "HEAD").is_file() or self.head() is None:
            return []
        out = self._git(
            "log",
            f"-n{limit}",
            "--format=%H %T %(trailers:key=Zuno-Call,valueonly,separator=%x2C)",
            HEAD_REF,
        )
        found: list[tuple[str, str, str | None]] = []
        for line in out.splitlines():
            parts = line.split(" ")
            if len(parts) >= 2:
                call = parts[2].strip() if len(parts) > 2 and parts[2].strip() else None
                found.append((parts[0], parts[1], call))
        return found

    def trailers(self, commit: str) -> dict[str, str]:
        """What a snapshot says of its call: ``Call``, ``Tool`` and ``Session``."""
        self._require(commit)
        body = self._git("cat-file", "commit", commit)
        return {m.group(1): m.group(2).strip() for m in _TRAILER.finditer(body)}

    def exists(self, commit: str) -> bool:
        """Whether this store holds the snapshot ``commit``."""
        if not (self.git_dir / "HEAD").is_file():
            return False
        return self._run("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0

    def _require(self, commit: str) -> None:
        if not self.exists(commit):
            raise CheckpointError(
                f"the checkpoint {commit[:12]} is not in {self.git_dir} (it was taken on "
                "another machine, or with another store, or the folder was removed)"
            )

    # Comparing ----------------------------------------------------------------------

    def changes(self, old: str, new: str) -> list[Change]:
        """How the tree of ``new`` differs from that of ``old`` (snapshots or trees).

        Paths a deny rule keeps from ``read`` are left out, whatever the snapshots hold.
        """
        out = self._git(
            "diff-tree", "-r", "-z", "--no-renames", "--raw", old, new, *self._keep_out()
        )
        return _parse_raw(out)

    def patch(self, old: str, new: str, *, color: bool = False) -> str:
        """The differences as a unified diff (binary files are named, not shown; denied
        paths left out)."""
        return self._git(
            "diff-tree",
            "-p",
            "-r",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            f"--color={'always' if color else 'never'}",
            old,
            new,
            *self._keep_out(),
        )

    def _keep_out(self) -> list[str]:
        """Pathspecs leaving the denied paths out of a comparison (none: nothing)."""
        if self._denied_given is None and not self._ready:
            with contextlib.suppress(OSError):
                text = (self.git_dir / DENIED_FILE).read_text()
                self._denied = DeniedPaths.of([ln for ln in text.split("\n") if ln])
        specs = self._denied.pathspecs()
        return ["--", ".", *specs] if specs else []

    # Restoring ----------------------------------------------------------------------

    def restore(self, targets: Mapping[str, Entry | None]) -> Restored:
        """Make each path of the workspace what its target says (None: absent).

        Removals come first (and the folders they leave empty are removed), then
        the writes, so a file may become a folder and back. Every step is made
        beneath the workspace, never through a symlink leading out of it. Large
        files recorded by size and hash only are not restored (``too_large``).

        Raises:
            CheckpointError: A path could not be restored; the ones before it were.
        """
        return restore_paths(self.workspace, targets, self._blobs)

    def _blobs(self, oids: list[str]) -> dict[str, bytes]:
        """The contents of many objects in one ``git cat-file --batch``."""
        return read_blobs(self.git_dir, self.workspace, oids)


def _parse_raw(out: str) -> list[Change]:
    """Parse ``diff-tree --raw -z``: ``:OLDMODE NEWMODE OLD NEW STATUS\\0PATH\\0`` each."""
    fields = out.split("\0")
    changes: list[Change] = []
    i = 0
    while i + 1 < len(fields) and fields[i].startswith(":"):
        old_mode, new_mode, old_oid, new_oid, _status = fields[i][1:].split(" ")
        path = fields[i + 1]
        old = None if old_mode == "000000" else Entry(old_mode, old_oid)
        new = None if new_mode == "000000" else Entry(new_mode, new_oid)
        changes.append(Change(path, old, new))
        i += 2
    return changes
