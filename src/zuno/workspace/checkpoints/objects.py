"""Git objects of the shadow store written and read in Python: a snapshot's cost is what changed.

A snapshot after a few changed paths needs a handful of objects: a blob per
changed file, the trees on the way from those files to the root, a commit. Git
itself would first read the whole index (tens of milliseconds at 200,000
files) before writing them; here they are written straight into the store's
``objects`` folder as loose objects, byte for byte what git writes (the same
ids), and the trees of the previous snapshot are read back from there. Git's
own commands read them as any other object.

Files larger than :data:`LARGE_FILE` are not copied: the snapshot holds a
small stand-in blob naming their size and SHA-256 (:func:`large_stand_in`), and
restoring one is refused (:func:`is_large_stand_in`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import zlib
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "LARGE_FILE",
    "LARGE_FILE_ENV",
    "EditConflict",
    "ObjectStore",
    "is_large_stand_in",
    "large_file_limit",
    "large_stand_in",
]

LARGE_FILE = 64 * 1024 * 1024
"""Files above this many bytes are recorded by size and hash only (not restorable)."""

LARGE_FILE_ENV = "ZUNO_CHECKPOINT_LARGE_FILE"
"""Overrides :data:`LARGE_FILE` (bytes)."""

_TREE = "40000"
_STAND_IN = b"\0zuno checkpoint: large file not copied\0"
_EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def large_file_limit() -> int:
    """The size above which files are recorded by size and hash only."""
    raw = os.environ.get(LARGE_FILE_ENV, "").strip()
    with contextlib.suppress(ValueError):
        if raw:
            return max(int(raw), 0)
    return LARGE_FILE


def large_stand_in(fd: int, size: int) -> bytes:
    """The stand-in blob of a large file open at ``fd``: its size and SHA-256."""
    digest = hashlib.sha256()
    while chunk := os.read(fd, 1 << 20):
        digest.update(chunk)
    return _STAND_IN + f"size {size}\nsha256 {digest.hexdigest()}\n".encode()


_STAND_IN_FORM = re.compile(re.escape(_STAND_IN) + rb"size [0-9]+\nsha256 [0-9a-f]{64}\n\Z")


def is_large_stand_in(data: bytes) -> bool:
    """Whether a blob is the stand-in of a large file (its content was not copied).

    The whole form is checked (marker, size, digest): a small file that merely
    starts with the marker is restored like any other.
    """
    return data.startswith(_STAND_IN) and _STAND_IN_FORM.match(data) is not None


class EditConflict(Exception):
    """A tree edit met what it cannot decide alone (a file where a folder is, a nested
    repository, an object not stored loose); the caller takes the full look."""


class ObjectStore:
    """The loose objects of one shadow store, with the trees read so far kept parsed."""

    def __init__(self, git_dir: Path) -> None:
        """Objects under ``git_dir/objects``."""
        self._objects = git_dir / "objects"
        self._trees: dict[str, dict[bytes, tuple[str, str]]] = {}
        # A tree's bytes and where each entry starts in them: an edit that only gives
        # entries new ids is a splice, not a new serialization of every entry (a root
        # folder of 2,000 folders costs milliseconds to sort and encode in Python).
        self._layouts: dict[str, tuple[bytes, dict[bytes, int]]] = {}
        self._folders: set[str] = set()  # fan-out folders known to exist
        self._listed = False

    def write(self, kind: str, data: bytes) -> str:
        """Store one object (when not there yet); its id."""
        header = f"{kind} {len(data)}\0".encode()
        digest = hashlib.sha1(header, usedforsecurity=False)
        digest.update(data)  # not header + data: a copy of a large file's bytes
        oid = digest.hexdigest()
        path = self._objects / oid[:2] / oid[2:]
        if os.path.exists(path):
            return oid
        temp = path.parent / f"tmp_obj_{os.getpid()}_{oid[2:10]}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        try:
            fd = os.open(temp, flags, 0o400) if self._has_folder(oid[:2]) else -1
        except FileNotFoundError:
            fd = -1  # the folder was removed since (git prune removes empty ones)
        if fd < 0:
            self._folders.discard(oid[:2])
            with contextlib.suppress(FileExistsError):
                os.mkdir(path.parent, 0o700)
            self._folders.add(oid[:2])
            fd = os.open(temp, flags, 0o400)
        with os.fdopen(fd, "wb") as out:
            compressor = zlib.compressobj(1)
            out.write(compressor.compress(header))
            out.write(compressor.compress(data))
            out.write(compressor.flush())
        os.replace(temp, path)
        return oid

    def _has_folder(self, name: str) -> bool:
        """Whether the fan-out folder ``name`` is known to exist (read once per store).

        A mkdir that fails because the folder exists still takes the parent's
        lock: about a millisecond a call on a busy disk, for every object.
        """
        if not self._listed:
            self._listed = True
            with contextlib.suppress(OSError):
                self._folders.update(os.listdir(self._objects))
        return name in self._folders

    def read(self, oid: str) -> tuple[str, bytes]:
        """The kind and content of a loose object.

        Raises:
            EditConflict: It is not stored loose (packed, or missing).
        """
        try:
            raw = zlib.decompress((self._objects / oid[:2] / oid[2:]).read_bytes())
        except (OSError, zlib.error) as exc:
            raise EditConflict(f"object {oid} is not stored loose") from exc
        header, _, data = raw.partition(b"\0")
        kind = header.split(b" ", 1)[0].decode()
        return kind, data

    def tree(self, oid: str) -> dict[bytes, tuple[str, str]]:
        """The entries of a tree: name -> (mode, id)."""
        found = self._trees.get(oid)
        if found is not None:
            return found
        kind, data = self.read(oid)
        if kind != "tree":
            raise EditConflict(f"object {oid} is a {kind}, not a tree")
        entries: dict[bytes, tuple[str, str]] = {}
        starts: dict[bytes, int] = {}
        pos = 0
        while pos < len(data):
            space = data.index(b" ", pos)
            nul = data.index(b"\0", space)
            mode = data[pos:space].decode()
            name = data[space + 1 : nul]
            entries[name] = (mode, data[nul + 1 : nul + 21].hex())
            starts[name] = pos
            pos = nul + 21
        self._keep(oid, entries, (data, starts))
        return entries

    def _keep(
        self,
        oid: str,
        entries: dict[bytes, tuple[str, str]],
        layout: tuple[bytes, dict[bytes, int]] | None,
    ) -> None:
        if len(self._trees) > 4096:
            self._trees.clear()
            self._layouts.clear()
        self._trees[oid] = entries
        if layout is not None:
            self._layouts[oid] = layout

    def write_tree(self, entries: Mapping[bytes, tuple[str, str]]) -> str:
        """Store a tree of ``entries`` in git's order; its id."""
        ordered = sorted(entries.items(), key=lambda e: e[0] + b"/" if e[1][0] == _TREE else e[0])
        parts = [
            mode.encode() + b" " + name + b"\0" + bytes.fromhex(oid)
            for name, (mode, oid) in ordered
        ]
        data = b"".join(parts)
        starts: dict[bytes, int] = {}
        at = 0
        for (name, _), part in zip(ordered, parts, strict=True):
            starts[name] = at
            at += len(part)
        oid = self.write("tree", data)
        self._keep(oid, dict(entries), (data, starts))
        return oid

    def _respliced(
        self, tree: str, entries: dict[bytes, tuple[str, str]], changed: set[bytes]
    ) -> str | None:
        """``tree`` with the ``changed`` entries given their new ids and modes, when each
        keeps its place and length (same name and kind, a mode of the same length);
        None otherwise."""
        layout = self._layouts.get(tree)
        old = self._trees.get(tree)
        if layout is None or old is None:
            return None
        data, starts = layout
        spliced = bytearray(data)
        for name in changed:
            before, after = old.get(name), entries.get(name)
            if before is None or after is None or len(before[0]) != len(after[0]):
                return None
            if (before[0] == _TREE) != (after[0] == _TREE):
                return None  # a file became a folder: its place in git's order moves
            at = starts[name]
            mode = after[0].encode()
            spliced[at : at + len(mode)] = mode
            id_at = at + len(mode) + 1 + len(name) + 1
            spliced[id_at : id_at + 20] = bytes.fromhex(after[1])
        data = bytes(spliced)
        oid = self.write("tree", data)
        self._keep(oid, entries, (data, starts))
        return oid

    def lookup(self, tree: str, path: str) -> tuple[str, str] | None:
        """The entry of ``path`` in ``tree`` (None: absent).

        Raises:
            EditConflict: A folder on the way is a file or a nested repository.
        """
        parts = os.fsencode(path).split(b"/")
        current = tree
        for i, name in enumerate(parts):
            entry = self.tree(current).get(name)
            if entry is None:
                return None
            if i == len(parts) - 1:
                return entry
            if entry[0] != _TREE:
                raise EditConflict(f"{path}: a parent folder is recorded as a file")
            current = entry[1]
        return None

    def edit(self, tree: str, edits: Mapping[str, tuple[str, str] | None]) -> str:
        """``tree`` with each path set to its entry (None: removed); the new tree's id.

        Folders left empty disappear (git records files); missing ones are made.

        Raises:
            EditConflict: A path is a folder in ``tree``, or a folder on its way is not.
        """
        split = {tuple(os.fsencode(p).split(b"/")): e for p, e in edits.items()}
        return self._edit(tree, split) or self.write_tree({})

    def _edit(
        self, tree: str | None, edits: Mapping[tuple[bytes, ...], tuple[str, str] | None]
    ) -> str | None:
        entries = dict(self.tree(tree)) if tree is not None and tree != _EMPTY_TREE else {}
        nested: dict[bytes, dict[tuple[bytes, ...], tuple[str, str] | None]] = {}
        changed: set[bytes] = set()
        for parts, entry in edits.items():
            name = parts[0]
            if len(parts) > 1:
                nested.setdefault(name, {})[parts[1:]] = entry
                continue
            if name in entries and entries[name][0] == _TREE:
                raise EditConflict(f"{os.fsdecode(name)} is recorded as a folder")
            if entry is None:
                entries.pop(name, None)
            else:
                entries[name] = entry
            changed.add(name)
        for name, inner in nested.items():
            old = entries.get(name)
            if old is not None and old[0] != _TREE:
                raise EditConflict(f"{os.fsdecode(name)} is recorded as a file")
            new = self._edit(old[1] if old else None, inner)
            if new is None:
                entries.pop(name, None)
            else:
                entries[name] = (_TREE, new)
            changed.add(name)
        if not entries:
            return None
        if tree is not None and entries == self._trees.get(tree):
            return tree
        if tree is not None:
            spliced = self._respliced(tree, entries, changed)
            if spliced is not None:
                return spliced
        return self.write_tree(entries)
