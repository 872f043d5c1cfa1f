"""What each session has seen of each file, so that a write never clobbers a change.

Two kinds of change, checked two ways:

- A whole-file replacement (``write`` over an existing file, apply_patch's
  ``Delete File``, an ``Add File`` or a move onto an existing file) is made only
  when the file's current content is the content this session last read or
  wrote; a file the session never read may be created, never replaced. A model
  that writes from a stale view gets an error telling it to read the file
  again, instead of silently undoing someone else's change (another session, a
  person's editor, a command).
- A content-anchored change (``edit``'s ``old_string``, apply_patch's update
  hunks) needs no prior read: it was computed by matching the file's current
  lines, and the commit writes it only if the file still holds the bytes it
  matched, checked under the same per-file lock. If what it removes and its
  context are there, nothing unseen is overwritten. The file's head row is
  still taken and swapped, so concurrent writers are serialised.

Calls typed by a person (``zuno call``, ``zuno batch``: the session's
``by_person``) are never refused for want of a read: the person sees the file
themselves. A record that this session saw other content is still honoured.

Two tables, in the runtime's store (SQLite or PostgreSQL), created on first use:

- ``file_seen``: per session and file, the fingerprint of the content the
  session last read (``read``) or wrote (the file tools);
- ``file_heads``: per file, the fingerprint of the content Zuno's file tools
  last wrote, and which session and call wrote it. Every write takes this row
  in the transaction that checks and records the write.

Files are named by their real absolute path (symlinks resolved), so a file read
through a link and written through another is one file. Workers sharing one
PostgreSQL store must therefore see the workspace at the same path.

A fingerprint is ``sha256:<hex>`` of the file's bytes. A read of a file larger
than :data:`HASH_LIMIT` (read shows a page of it) records ``stat:`` with the
file's identity, size and change times instead of hashing gigabytes; a write
then compares that identity. A write always records the hash of what it wrote.

The check and compare-and-swap (:meth:`FileVersions.claim`), in one store
transaction around the file write:

1. the head row of every file to be written is created if missing and locked,
   in path order (``SELECT ... FOR UPDATE`` on PostgreSQL; SQLite's
   ``BEGIN IMMEDIATE`` already serializes every writer of the database file);
2. with the rows held, the file is looked at on disk: a file replaced whole must
   have the fingerprint this session recorded for it (an anchored change skips
   this), and the tool's change must have been computed from those very bytes;
3. the file is written;
4. the head is swapped, ``UPDATE ... WHERE path = ? AND hash = <the head read
   in 1>``, and the session's record set to the new fingerprint; the
   transaction commits.

Two sessions that both read content h1 and both write: the second to take the
head row waits until the first commits (or rolls back), then finds h2 on disk
and is refused. This holds across processes and across workers sharing a
PostgreSQL store. A write that fails rolls the transaction back; the disk is
the truth the next check reads, so a lost commit never lets a stale write in.

Sub-agents (``task``) do not share their parent's records, nor the parent
theirs: a record stands for content that one conversation has seen, and a
child's transcript does not hold the parent's reads. A child reads before it
replaces; after a child changed a file, the parent reads it again.

Contexts without a store (a tool's own tests) are not tracked.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from zuno.contract.tool import ToolContext, ToolError
from zuno.durability.store import Store, StoreError
from zuno.durability.store.connection import StoreConnection

__all__ = [
    "FILE_VERSIONS_SCHEMA",
    "HASH_LIMIT",
    "FileChanged",
    "FileVersions",
    "Head",
    "Seen",
    "WriteClaim",
    "claim_writes",
    "fingerprint",
    "remember_read",
    "versions_for",
]

HASH_LIMIT = 16 << 20
"""Files larger than this (bytes) are fingerprinted by ``read`` from their status, not hashed."""

_LOCK_TIMEOUT_MS = 30_000
"""How long a write waits for another worker's write of the same file (PostgreSQL)."""

_ABSENT = ""
"""The head's fingerprint of a file that does not exist (or was never written by Zuno)."""

FILE_VERSIONS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS file_seen ("
    " session_id TEXT NOT NULL, path TEXT NOT NULL, hash TEXT NOT NULL,"
    " how TEXT NOT NULL, call_id TEXT, at REAL NOT NULL,"
    " PRIMARY KEY (session_id, path))",
    "CREATE TABLE IF NOT EXISTS file_heads ("
    " path TEXT PRIMARY KEY, hash TEXT NOT NULL, session_id TEXT, call_id TEXT,"
    " at REAL NOT NULL)",
)
"""The tables: what each session saw of each file, and each file's last write by Zuno."""

_log = logging.getLogger("zuno.durability.file_versions")
_ready: weakref.WeakSet[Store] = weakref.WeakSet()


class FileChanged(ToolError):
    """A write refused because the file is not what the session last saw; nothing was written.

    Stored as outcome ``error``: the model must read the file again.
    """


@dataclass(frozen=True, slots=True)
class Seen:
    """What one session last saw of one file."""

    fingerprint: str
    how: Literal["read", "wrote"]
    call_id: str | None


@dataclass(frozen=True, slots=True)
class Head:
    """The last write of one file by Zuno's file tools ("" fingerprint: absent or none yet)."""

    fingerprint: str
    session_id: str | None
    call_id: str | None


# --- fingerprints ------------------------------------------------------------------


def fingerprint(data: bytes) -> str:
    """The fingerprint of content held in memory: its SHA-256."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _status_mark(info: os.stat_result) -> str:
    # Any write through a path replaces the inode or changes its times and size.
    return f"stat:{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}:{info.st_ctime_ns}"


def _fingerprint_fd(fd: int, info: os.stat_result) -> str:
    """The fingerprint of an open regular file, read with ``pread`` (its offset is kept)."""
    if info.st_size > HASH_LIMIT:
        return _status_mark(info)
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        digest.update(chunk)
        offset += len(chunk)
        if offset > HASH_LIMIT:  # it grew past the limit while being read
            return _status_mark(os.fstat(fd))
    return "sha256:" + digest.hexdigest()


def _matches(recorded: str, info: os.stat_result, content: Callable[[], bytes]) -> bool:
    if recorded.startswith("stat:"):
        return recorded == _status_mark(info)
    return recorded == fingerprint(content())


# --- the store ---------------------------------------------------------------------


class FileVersions:
    """The records of one store.

    Args:
        store: The runtime's store; the tables are created on first use.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        if store not in _ready:
            store.ensure_schema(FILE_VERSIONS_SCHEMA)
            _ready.add(store)

    def record_read(self, session_id: str, call_id: str | None, path: str, mark: str) -> None:
        """Record that the session has seen ``path`` with fingerprint ``mark``."""
        with self.store.transaction() as db:
            _remember(db, session_id, call_id, path, mark, "read")

    def seen(self, session_id: str, path: str | Path) -> Seen | None:
        """What the session last saw of the file at ``path`` (symlinks resolved), if anything."""
        rows = self.store.query(
            "SELECT hash, how, call_id FROM file_seen WHERE session_id = ? AND path = ?",
            (session_id, _key(path)),
        )
        return Seen(rows[0][0], rows[0][1], rows[0][2]) if rows else None

    def head(self, path: str | Path) -> Head | None:
        """The last write of the file at ``path`` (symlinks resolved) by Zuno, if any."""
        rows = self.store.query(
            "SELECT hash, session_id, call_id FROM file_heads WHERE path = ?", (_key(path),)
        )
        return Head(rows[0][0], rows[0][1], rows[0][2]) if rows else None

    @contextmanager
    def claim(
        self, session_id: str, call_id: str, paths: Iterable[str], *, by_person: bool = False
    ) -> Generator[WriteClaim]:
        """Hold the heads of ``paths`` for one write; commit what it recorded on leaving.

        ``by_person``: the call was typed by a person, so a file the session
        never read may be replaced (see the module docstring).

        Leaving by an exception rolls back: nothing is recorded. Paths found
        only while writing (a symlink changed meanwhile) are taken when
        :meth:`WriteClaim.verify` meets them.

        Raises:
            StoreError: The store cannot be used now (nothing was written).
        """
        with self.store.transaction() as db:
            # PostgreSQL: a worker stuck inside its write must not hang this one forever.
            db.execute(f"/*pg: SET LOCAL lock_timeout = {_LOCK_TIMEOUT_MS}*/")
            claim = WriteClaim(db, session_id, call_id, by_person)
            claim.take(sorted({_key(p) for p in paths}))
            yield claim


@dataclass(slots=True)
class WriteClaim:
    """The head rows one write holds, inside its store transaction."""

    db: StoreConnection
    session_id: str
    call_id: str
    by_person: bool = False
    """The calls are typed by a person: a file never read may be replaced."""
    heads: dict[str, Head] = field(default_factory=lambda: {})
    seen: dict[str, Seen | None] = field(default_factory=lambda: {})
    """This session's records of the files held, read with their heads."""
    landed: bool = False
    """Whether a file was written (from then on, the call changed something)."""

    def take(self, keys: Sequence[str]) -> None:
        """Create the heads that are missing, then lock them, in path order."""
        now = time.time()
        keys = [k for k in keys if k not in self.heads]
        for key in keys:
            self.db.execute(
                "INSERT INTO file_heads (path, hash, at) VALUES (?, ?, ?)"
                " ON CONFLICT (path) DO NOTHING",
                (key, _ABSENT, now),
            )
        # One statement per row keeps the lock order; PostgreSQL sends them all,
        # with the session's records, before waiting for the first answer.
        heads = [
            self.db.execute(
                "SELECT hash, session_id, call_id FROM file_heads WHERE path = ?"
                " /*pg: FOR UPDATE*/",
                (key,),
            )
            for key in keys
        ]
        seen = [
            self.db.execute(
                "SELECT hash, how, call_id FROM file_seen WHERE session_id = ? AND path = ?",
                (self.session_id, key),
            )
            for key in keys
        ]
        for key, head_rows, seen_rows in zip(keys, heads, seen, strict=True):
            row = head_rows.fetchone()
            self.heads[key] = Head(row[0], row[1], row[2])
            row = seen_rows.fetchone()
            self.seen[key] = None if row is None else Seen(row[0], row[1], row[2])

    def verify(
        self,
        path: str | Path,
        info: os.stat_result | None,
        content: Callable[[], bytes],
        shown: str,
        *,
        anchored: bool = False,
    ) -> None:
        """Refuse to replace the file at ``path`` unless this session saw its current content.

        The file's head is taken either way, so writers of one file are serialised.

        Args:
            path: Where the write lands (symlinks are resolved here).
            info: The file's status now; None when it does not exist (a new
                file may always be created).
            content: Reads the file's current bytes (called only when needed).
            shown: The path as the call named it, for the message.
            anchored: The change was computed by matching the file's content
                and is written only if the file still holds it (the caller
                compares, under this lock): no prior read is needed.

        Raises:
            FileChanged: The session never read the file, or it changed since.
        """
        key = _key(path)
        self.take([key])
        if info is None or anchored:
            return
        seen = self.seen[key]
        if seen is None:
            if self.by_person:
                return
            raise FileChanged(
                f"{shown} already exists and this session has not read it; nothing was "
                "written. Read it first (the read tool), then make the change against its "
                "current content. Only a new file may be written without reading."
            )
        if _matches(seen.fingerprint, info, content):
            return
        head = self.heads[key]
        if head.session_id not in (None, self.session_id) and _matches(
            head.fingerprint, info, content
        ):
            who = f"session {head.session_id} wrote it (call {head.call_id})"
        else:
            who = (
                "it was changed outside Zuno's file tools: by a person, another program "
                "or a command (this session's shell commands included)"
            )
        raise FileChanged(
            f"{shown} changed since this session last {seen.how} it: {who}. Nothing was "
            "written. Read it again, then redo the change against its current content."
        )

    def wrote(self, path: str | Path, data: bytes | None) -> None:
        """Record that this call wrote ``data`` to ``path`` (None: deleted it).

        The head is swapped only from the value this claim read: a mismatch
        means the row changed under a lock this transaction holds, which is a
        defect, and rolls everything back.
        """
        self.landed = True
        key = _key(path)
        self.take([key])
        mark = _ABSENT if data is None else fingerprint(data)
        swapped = self.db.execute(
            "UPDATE file_heads SET hash = ?, session_id = ?, call_id = ?, at = ?"
            " WHERE path = ? AND hash = ? RETURNING path",
            (mark, self.session_id, self.call_id, time.time(), key, self.heads[key].fingerprint),
        )
        if swapped.fetchone() is None:
            raise StoreError(f"the version record of {key} changed under its lock")
        self.heads[key] = Head(mark, self.session_id, self.call_id)
        self.seen[key] = None if data is None else Seen(mark, "wrote", self.call_id)
        if data is None:
            self.db.execute(
                "DELETE FROM file_seen WHERE session_id = ? AND path = ?", (self.session_id, key)
            )
        else:
            _remember(self.db, self.session_id, self.call_id, key, mark, "wrote")


def _remember(
    db: StoreConnection,
    session_id: str,
    call_id: str | None,
    path: str,
    mark: str,
    how: Literal["read", "wrote"],
) -> None:
    db.execute(
        "INSERT INTO file_seen (session_id, path, hash, how, call_id, at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, path) DO UPDATE SET"
        " hash = excluded.hash, how = excluded.how, call_id = excluded.call_id,"
        " at = excluded.at",
        (session_id, path, mark, how, call_id, time.time()),
    )


def _key(path: str | Path) -> str:
    """The name a file is recorded under: its real absolute path.

    :func:`os.path.realpath` fails (EINVAL) when a symlink on the path is
    replaced between its two looks at it. A path that keeps changing is named
    as it is written: at worst the file is not found under that name and the
    write is refused, never let through.
    """
    for _ in range(3):
        try:
            return os.path.realpath(path)
        except OSError:
            continue
    return os.path.abspath(path)


# --- what the tools call -----------------------------------------------------------


def versions_for(ctx: ToolContext) -> FileVersions | None:
    """The records of the call's store; None when the call runs without one."""
    store: Any = getattr(ctx.services, "store", None)
    if store is None:
        return None
    return FileVersions(store)


def remember_read(ctx: ToolContext, fd: int) -> None:
    """Record that this session has seen the regular file open as ``fd`` (all of it).

    Called by ``read`` for any page of a file: the fingerprint covers the
    whole file, so a later write is checked against every byte, not the page
    shown. A store that cannot be reached leaves nothing recorded (a later
    write is then refused, never let through).
    """
    try:
        versions = versions_for(ctx)  # makes its tables on first use: a locked store fails here
    except StoreError as exc:
        _log.warning("zuno: could not record a read: %s", exc)
        return
    if versions is None:
        return
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink == 0:
        return  # a deleted file's name now belongs to nothing
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return
    if real.startswith(("/proc/", "/sys/")):
        return  # the kernel's pseudo files: not written by file tools, and may be endless
    try:
        versions.record_read(ctx.session_id, ctx.call_id, real, _fingerprint_fd(fd, info))
    except StoreError as exc:
        _log.warning("zuno: could not record that %s was read: %s", real, exc)


@contextmanager
def claim_writes(ctx: ToolContext, paths: Iterable[str | Path]) -> Generator[WriteClaim | None]:
    """Hold the heads of ``paths`` around one call's writes (None: the call is not tracked).

    The writes go between :meth:`WriteClaim.verify` and :meth:`WriteClaim.wrote`.
    A store failure before anything was written is a :class:`ToolError`
    (nothing written). One after the write (its commit) is only logged: the
    file is written; this session's record then stays on the old content, so
    its next write of the file is refused until it reads again.
    """
    versions = versions_for(ctx)
    if versions is None:
        yield None
        return
    claim: WriteClaim | None = None
    try:
        session: Any = ctx.extra.get("session")
        by_person = bool(getattr(session, "by_person", False))
        with versions.claim(
            ctx.session_id, ctx.call_id, [str(p) for p in paths], by_person=by_person
        ) as claim:
            yield claim
    except StoreError as exc:
        if claim is None or not claim.landed:
            raise ToolError(
                f"could not check whether the file changed since this session read it "
                f"({exc}); nothing was written. Try again"
            ) from exc
        _log.warning("zuno: a write landed but could not be recorded: %s", exc)
