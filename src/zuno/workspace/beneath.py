"""Files opened beneath a root folder, never through a symlink that leads out of it.

Checking a path and then opening it by name can be raced: between the two, a
process that may write the workspace (a sandboxed command left running in the
background) can replace a folder on the path with a symlink to anywhere. Here a
path is resolved relative to a descriptor of the root, by the kernel in one
call (``openat2`` with ``RESOLVE_BENEATH``) or, where that is missing, one
component at a time (``openat`` with ``O_NOFOLLOW``). Every later step (create
a temporary file, rename it over the target, delete, read) names its file
relative to the descriptor of the folder that was resolved, never by a path
again. A symlink met on the way is followed only while it stays beneath the
root; one that leads out raises :class:`EscapesRoot`, whenever it appears.

Typical use::

    with Beneath(workspace) as root:
        spot = root.locate(PurePosixPath("src/app.py"), follow_links=True, create_folders=True)
        spot.folder.replace_file(spot.name, data, like=spot.stat)

Linux only (``O_PATH``, ``/proc/self/fd``); the fallback walk needs no
``openat2``, so any Linux kernel Zuno runs on is covered.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import secrets
import stat
from collections import deque
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType

__all__ = ["Beneath", "Confined", "EscapesRoot", "Folder", "Spot", "openat2_available"]

_MAX_LINKS = 40  # the kernel's own limit on symlinks in one resolution
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_NEW_FILE_MODE = 0o666  # narrowed by the process umask, like any new file

# openat2(2): struct open_how and the RESOLVE_* flags of <linux/openat2.h>.
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(platform.machine())
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_openat2_enabled = _SYS_OPENAT2 is not None
"""False once the kernel said it has no openat2 (tests set it to force the walk)."""


class EscapesRoot(Exception):
    """A path leads out of the root, through ``..`` or a symlink. Nothing was opened.

    Not an :class:`OSError` on purpose: it is a refusal, not an I/O failure,
    and callers must not mistake one for the other.
    """


@dataclass(frozen=True, slots=True)
class Confined:
    """A path named relative to the root it must stay beneath.

    Attributes:
        root: The root folder (as given; it is trusted, symlinks in it included).
        rel: The path from the root; ``.`` is the root itself.
    """

    root: Path
    rel: PurePosixPath

    @property
    def path(self) -> Path:
        """The absolute path, for messages."""
        return self.root / self.rel

    @property
    def name(self) -> str:
        """The last component (empty for the root itself)."""
        return self.rel.name


def openat2_available() -> bool:
    """Whether paths are resolved by ``openat2`` (else by the component walk)."""
    return _openat2_enabled


def _openat2(dirfd: int, path: str, flags: int, resolve: int) -> int:
    assert _SYS_OPENAT2 is not None
    how = _OpenHow(flags, 0, resolve)
    fd = int(
        _libc.syscall(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(dirfd),
            ctypes.c_char_p(os.fsencode(path)),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return fd


class Folder:
    """An open folder beneath the root. Names given to it are single components."""

    def __init__(self, fd: int, real: tuple[str, ...] | None) -> None:
        self.fd = fd
        self.real = real
        """Its path from the root, component by component, when the walk found it."""

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry's own status (a symlink is not followed), or None when absent."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def read(self, name: str) -> bytes:
        """The bytes of a regular file; a symlink, FIFO or device is refused, never opened."""
        # O_NONBLOCK: a FIFO swapped in must not hang the call; the type is checked next.
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        fd = os.open(name, flags, dir_fd=self.fd)
        with os.fdopen(fd, "rb") as handle:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), name)
            if not stat.S_ISREG(mode):
                raise OSError(errno.EINVAL, "not a regular file", name)
            os.set_blocking(fd, True)
            return handle.read()

    def write_temporary(
        self, name: str, data: bytes, *, mode: int | None, owner: tuple[int, int] | None
    ) -> str:
        """Write data to a new temporary file beside name, flushed to disk; return its name.

        Args:
            name: The file the temporary will replace (it names the temporary).
            data: The content.
            mode: Permission bits to give it (None: the default, narrowed by the umask).
            owner: ``(uid, gid)`` to give it, when this process may.

        On any failure the temporary file is removed again.
        """
        temp = _side_name(name, "tmp")
        fd = os.open(
            temp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            _NEW_FILE_MODE,
            dir_fd=self.fd,
        )
        try:
            try:
                if owner is not None and owner != (os.geteuid(), os.getegid()):
                    # Only a privileged writer can keep another user's ownership; anyone
                    # else becomes the owner, as an editor's save-by-rename does.
                    with contextlib.suppress(PermissionError):
                        os.fchown(fd, *owner)
                if mode is not None:
                    os.fchmod(fd, mode)  # after fchown, which may clear set-id bits
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=self.fd)
            raise
        return temp

    def replace(self, source: str, target: str) -> None:
        """Rename source over target, both in this folder (atomic; target may exist)."""
        os.replace(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def rename_aside(self, name: str, tag: str) -> str:
        """Rename name to a fresh hidden name in this folder and return that name."""
        aside = _side_name(name, tag)
        os.rename(name, aside, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        return aside

    def remove(self, name: str) -> None:
        """Delete the entry name (a symlink itself, not its target)."""
        os.unlink(name, dir_fd=self.fd)

    def replace_file(self, name: str, data: bytes, *, like: os.stat_result | None) -> None:
        """Replace name with data atomically, keeping the mode and owner of ``like``.

        A reader sees the old file or the new one, never half of either; on any
        failure the temporary file is removed and name is untouched.
        """
        mode = None if like is None else stat.S_IMODE(like.st_mode)
        owner = None if like is None else (like.st_uid, like.st_gid)
        temp = self.write_temporary(name, data, mode=mode, owner=owner)
        try:
            self.replace(temp, name)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=self.fd)
            raise
        self.sync()

    def sync(self) -> None:
        """Flush the folder's entries, so a rename is durable.

        Some file systems cannot fsync a folder; the change has still happened.
        """
        with contextlib.suppress(OSError):
            fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.fd)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


@dataclass(frozen=True, slots=True)
class Spot:
    """Where a name was found: its folder, its last component and its status.

    Attributes:
        folder: The open folder that holds the entry.
        name: The entry's name in that folder.
        stat: The entry's own status, or None when it does not exist.
        followed: Whether a symlink at the last component was followed to get here.
    """

    folder: Folder
    name: str
    stat: os.stat_result | None
    followed: bool = False


class Beneath:
    """A root folder, held open, and every folder opened beneath it.

    Closing (leaving the ``with`` block) closes every descriptor. Leaving it
    by an exception also removes the folders :meth:`locate` created, when
    they are still empty, so a refused or failed write leaves no trace.
    """

    def __init__(self, root: Path, *, openat2: bool | None = None) -> None:
        """Open root.

        Args:
            root: The folder to stay beneath. Symlinks in this path itself are
                followed: the root is trusted, what lies beneath it is not.
            openat2: Use ``openat2`` (default: when the kernel has it); False
                forces the component walk.
        """
        self.path = root
        self._openat2 = _openat2_enabled if openat2 is None else openat2 and _openat2_enabled
        self._fd = os.open(root, _DIR_FLAGS)
        real = Path(os.path.realpath(root))
        # An absolute symlink may name the root by its given path or its real one.
        self._prefixes = {_components(PurePosixPath(root)), _components(PurePosixPath(real))}
        self._real_root = real
        self._folders: dict[tuple[tuple[str, ...], bool], Folder] = {}
        self._opened: list[Folder] = []
        self._created: list[tuple[Folder, str]] = []

    def __enter__(self) -> Beneath:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.remove_created()
        self.close()

    def close(self) -> None:
        """Close every descriptor (the root's and each folder's)."""
        for folder in self._opened:
            with contextlib.suppress(OSError):
                os.close(folder.fd)
        self._opened.clear()
        self._folders.clear()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def remove_created(self) -> None:
        """Remove the folders :meth:`locate` created, newest first, where still empty."""
        for parent, name in reversed(self._created):
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=parent.fd)
        self._created.clear()

    def locate(
        self, rel: PurePosixPath, *, follow_links: bool = True, create_folders: bool = False
    ) -> Spot:
        """Find the entry rel beneath the root, without ever leaving it.

        Args:
            rel: The path from the root (relative; ``..`` may not climb above the root).
            follow_links: Follow a symlink at the last component (to write
                through it, keeping the link); the link's target must be beneath
                the root too. False finds the link itself (to delete it).
            create_folders: Create the missing folders above the entry.

        Raises:
            EscapesRoot: The path, or a symlink on it, leads out of the root.
            IsADirectoryError: rel names the root, or a link names a folder by ``..``.
            OSError: A folder on the way is missing, not a folder, or unreadable.
        """
        parts = _components(rel)
        if not parts or parts[-1] == "..":
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(rel))
        folder = self._open_folder(parts[:-1], create_folders)
        name = parts[-1]
        followed = False
        for _ in range(_MAX_LINKS):
            st = folder.lstat(name)
            if not follow_links or st is None or not stat.S_ISLNK(st.st_mode):
                return Spot(folder, name, st, followed)
            try:
                text = os.readlink(name, dir_fd=folder.fd)
            except OSError as error:
                if error.errno == errno.EINVAL:
                    continue  # no longer a symlink: look again
                raise
            target = self._link_target(self._real_of(folder), text)
            if not target or target[-1] in ("", ".", ".."):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), text)
            folder = self._walk(target[:-1], create_folders)
            name = target[-1]
            followed = True
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(rel))

    def real_path(self, spot: Spot) -> Path:
        """The path of spot's entry from the root's given path, through any links followed."""
        return self.path.joinpath(*self._real_of(spot.folder), spot.name)

    # Resolution ---------------------------------------------------------------

    def _open_folder(self, parts: tuple[str, ...], create: bool) -> Folder:
        key = (parts, create)
        cached = self._folders.get(key)
        if cached is not None:
            return cached
        folder: Folder | None = None
        if not parts:
            folder = self._adopt(os.dup(self._fd), ())
        elif self._openat2:
            folder = self._open_by_kernel(parts, create)
        if folder is None:
            folder = self._walk(parts, create)
        self._folders[key] = folder
        return folder

    def _open_by_kernel(self, parts: tuple[str, ...], create: bool) -> Folder | None:
        """The folder opened by openat2, or None when the walk must decide."""
        global _openat2_enabled
        try:
            fd = _openat2(
                self._fd, "/".join(parts), _DIR_FLAGS, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS
            )
        except OSError as error:
            if error.errno in (errno.ENOSYS, errno.EPERM):
                # No openat2 (an old kernel, or a seccomp filter): walk from now on.
                _openat2_enabled = self._openat2 = False
                return None
            if error.errno == errno.ENOENT and create:
                return None  # the walk creates what is missing
            if error.errno in (errno.EXDEV, errno.ELOOP, errno.EAGAIN):
                # Leaving the root, an absolute symlink (which RESOLVE_BENEATH
                # refuses even when it names a place inside), or a rename racing
                # a "..": the walk tells these apart and words the refusal.
                return None
            raise
        return self._adopt(fd, None)

    def _walk(self, parts: tuple[str, ...] | list[str], create: bool) -> Folder:
        """Open a folder one component at a time, following symlinks that stay beneath."""
        stack: list[int] = [os.dup(self._fd)]
        names: list[str] = []
        pending = deque(parts)
        links = 0
        try:
            while pending:
                part = pending.popleft()
                if part in ("", "."):
                    continue
                if part == "..":
                    if not names:
                        raise EscapesRoot(f"{'/'.join(parts)} climbs above {self.path}")
                    os.close(stack.pop())
                    names.pop()
                    continue
                fd = self._open_component(stack[-1], part, create)
                mode = os.fstat(fd).st_mode
                if stat.S_ISDIR(mode):
                    stack.append(fd)
                    names.append(part)
                    continue
                if not stat.S_ISLNK(mode):
                    os.close(fd)
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), part)
                try:
                    text = os.readlink("", dir_fd=fd)
                finally:
                    os.close(fd)
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), "/".join(parts))
                target = self._link_target(tuple(names), text)
                # Start again from the root along the link's target, then the rest.
                for fd in stack[1:]:
                    os.close(fd)
                del stack[1:]
                names.clear()
                pending.extendleft(reversed(target))
        except BaseException:
            for fd in stack:
                os.close(fd)
            raise
        for fd in stack[:-1]:
            os.close(fd)
        return self._adopt(stack[-1], tuple(names))

    def _open_component(self, dirfd: int, part: str, create: bool) -> int:
        """One entry of a folder, never following a symlink (the link itself is opened)."""
        flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            return os.open(part, flags, dir_fd=dirfd)
        except FileNotFoundError:
            if not create:
                raise
        try:
            os.mkdir(part, 0o777, dir_fd=dirfd)
        except FileExistsError:
            pass  # made meanwhile by someone else: open what is there, as any walker would
        else:
            self._created.append((self._adopt(os.dup(dirfd), None), part))
        return os.open(part, flags, dir_fd=dirfd)

    def _link_target(self, base: tuple[str, ...], text: str) -> tuple[str, ...]:
        """The components from the root of a symlink's target (``..`` not yet applied).

        Args:
            base: The real path from the root of the folder holding the link.
            text: The link's content.
        """
        if not text.startswith("/"):
            return (*base, *text.split("/"))
        absolute = _components(PurePosixPath("/" + text.lstrip("/")))
        for prefix in self._prefixes:
            if absolute[: len(prefix)] == prefix:
                return absolute[len(prefix) :]
        raise EscapesRoot(f"a symlink leads to {text}, outside {self.path}")

    def _real_of(self, folder: Folder) -> tuple[str, ...]:
        """A folder's real path from the root, asking the kernel when the walk did not see it."""
        if folder.real is None:
            try:
                where = Path(os.readlink(f"/proc/self/fd/{folder.fd}"))
                folder.real = where.relative_to(self._real_root).parts
            except (OSError, ValueError) as error:
                # Moved out from under the root since it was opened, or no /proc.
                raise EscapesRoot(f"a folder beneath {self.path} was moved away") from error
        return folder.real

    def _adopt(self, fd: int, real: tuple[str, ...] | None) -> Folder:
        folder = Folder(fd, real)
        self._opened.append(folder)
        return folder


def _components(path: PurePosixPath) -> tuple[str, ...]:
    """The components of a path, without the leading ``/`` of an absolute one."""
    return tuple(p for p in path.parts if p not in ("/", "//"))


def _side_name(name: str, tag: str) -> str:
    """A fresh hidden name beside name (short enough for any file system's limit)."""
    stem = os.fsdecode(os.fsencode(name)[:150])
    return f".{stem}.{secrets.token_hex(4)}.zuno-{tag}"
