"""The full look: bringing git's index up to the whole workspace.

When no folder watch can name what changed (the first snapshot, a lost event,
another process wrote the index), ``git status`` stats each known file (the
index remembers the rest) and, with the untracked cache, reads only the
folders whose own stat changed; only those paths are hashed again. Paths a
watched snapshot put in a tree but not in the index (kept in :data:`PENDING_FILE`)
are folded in, large files are staged as stand-ins
(:func:`zuno.workspace.checkpoints.objects.large_stand_in`) and what deny rules
cover is taken out of the index.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat

from zuno.workspace.checkpoints.fast import large_files
from zuno.workspace.checkpoints.git import first_line
from zuno.workspace.checkpoints.objects import large_stand_in
from zuno.workspace.checkpoints.shadow import ShadowStore
from zuno.workspace.checkpoints.types import CheckpointError

__all__ = ["PENDING_FILE", "FullLook"]

PENDING_FILE = "zuno-pending"
"""The file in the git folder naming the paths in the last tree but not yet in the index."""

_BULK = 500  # more changed paths than this: `git add --all` rather than update-index


class FullLook(ShadowStore):
    """Staging the whole workspace's changes in the shadow store's index."""

    def _update_index(self) -> tuple[str, ...]:
        """The full look: stage what changed anywhere; the unreadable files."""
        large = {p for p in large_files(self.workspace, self._large) if not self._denied.covers(p)}
        keep_out = [*self._denied.pathspecs(), *(f":(exclude,literal,top){p}" for p in large)]
        status = self._run(
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
            "--ignore-submodules=all",
            *(["--", ".", *keep_out] if keep_out else []),
        )
        if status.returncode != 0:
            raise CheckpointError(f"git status failed: {first_line(status.stderr)}")
        changed = _changed_paths(status.stdout)
        changed += self._pending(skip=set(changed) | large)
        unreadable: tuple[str, ...] = ()
        if len(changed) > _BULK:
            # Many new paths (the first snapshot): one `add` of the whole tree is far
            # cheaper than naming them (update-index slows with each path it adds).
            unreadable = self._add_all(keep_out)
        elif changed:
            # Removals first, so a file that became a folder (or back) leaves the
            # index before its replacement comes in (--replace is quadratic with a
            # split index).
            update = self._run(
                "update-index",
                "--add",
                "--remove",
                "-z",
                "--stdin",
                input="".join(f"{path}\0" for path in changed),
            )
            if update.returncode != 0:
                # A file that cannot be read fails the whole batch: add what can be
                # read, and name the rest (left out of this snapshot).
                unreadable = self._add_all(keep_out)
        self._stage_large(large)
        self._drop_denied()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.git_dir / PENDING_FILE)
        return unreadable

    def _add_all(self, keep_out: list[str]) -> tuple[str, ...]:
        add = self._run("add", "--all", "--ignore-errors", "--", ".", *keep_out)
        unreadable = tuple(_unreadable_paths(add.stderr))
        if add.returncode != 0 and not unreadable:
            raise CheckpointError(f"git add failed: {first_line(add.stderr)}")
        return unreadable

    def _pending(self, *, skip: set[str]) -> list[str]:
        """The paths watched snapshots put in a tree but not in the index (not folders)."""
        try:
            raw = (self.git_dir / PENDING_FILE).read_bytes()
        except FileNotFoundError:
            return []
        found: list[str] = []
        for path in dict.fromkeys(os.fsdecode(p) for p in raw.split(b"\0") if p):
            if path in skip or self._denied.covers(path):
                continue
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                if stat.S_ISDIR(os.lstat(self.workspace / path).st_mode):
                    continue  # now a folder: status named what is in it
            found.append(path)
        return found

    def _stage_large(self, large: set[str]) -> None:
        """Put the stand-in of each large, not ignored file in the index."""
        if not large:
            return
        shown = self._ignored(sorted(large))
        lines: list[str] = []
        for path in sorted(large - shown):
            try:
                fd = os.open(self.workspace / path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                oid = self._stand_ins.get(key)
                if oid is None:
                    oid = self._objects.write("blob", large_stand_in(fd, st.st_size))
                    self._stand_ins[key] = oid
            finally:
                os.close(fd)
            mode = "100755" if st.st_mode & stat.S_IXUSR else "100644"
            lines.append(f"{mode} {oid}\t{path}\0")
        if lines:
            self._git("update-index", "--add", "-z", "--index-info", input="".join(lines))

    def _drop_denied(self) -> None:
        """Take out of the index what deny rules now cover (staged before a rule came)."""
        if not self._denied.patterns:
            return
        including = [s.replace(":(exclude,", ":(", 1) for s in self._denied.pathspecs()]
        listed = self._run("ls-files", "-z", "--cached", "--", *including)
        paths = [p for p in listed.stdout.split("\0") if p]
        if paths:
            listing = "".join(f"{p}\0" for p in paths)
            self._git("update-index", "--force-remove", "-z", "--stdin", input=listing)


def _changed_paths(out: str) -> list[str]:
    """The paths ``status --porcelain -z`` shows changed in the work tree, or untracked
    (the removed ones first).

    Each entry is ``XY PATH``: X compares the index with the last snapshot
    (already in the index: nothing to do), Y the work tree with the index.
    """
    removed: list[str] = []
    paths: list[str] = []
    for entry in out.split("\0"):
        if len(entry) < 4:
            continue
        xy, path = entry[:2], entry[3:]
        if xy[1] == "D":
            removed.append(path)
        elif xy == "??" or xy[1] in "MT":
            # A nested repository shows as a folder ("sub/"): it is added as one entry.
            paths.append(path.rstrip("/"))
    return removed + paths


def _unreadable_paths(stderr: str) -> list[str]:
    """The files ``git add --ignore-errors`` could not read, from its messages."""
    return re.findall(r"unable to index file '(.+)'", stderr)
