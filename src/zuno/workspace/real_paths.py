"""Where a path argument really leads, as permission rules must see it.

A rule on ``.env`` means the file, not the text ``.env``: ``sub/../.env``,
``//ws/.env``, ``/proc/self/root/ws/.env`` and a symlink ``link -> .env`` all
reach it. :func:`touch` resolves a path argument the way the kernel will:
``~`` expanded, relative paths taken from the workspace, every symlink followed
(``/proc/self/root`` is one, to ``/``), ``..`` applied after the link before it,
and the result shown relative to the workspace when it is inside.

The resolution walks the path component by component, so it also sees what a
plain :func:`os.path.realpath` hides: a path that passes through a process's
``/proc`` entry. Those are refused whatever the rules say (:func:`proc_refusal`):

- the memory, environment and command line of any process (``environ``,
  ``mem``, ``auxv``, ``maps``, ``cmdline``, ...): Zuno's own environment holds
  the provider's API key;
- a process's open files (``/proc/<pid>/fd/N``, ``/dev/fd/N``, ``map_files``):
  they can name a deleted or anonymous file no rule can match;
- another process's root or working folder (``/proc/<pid>/root``): a different
  mount namespace, where the path means something else;
- ``/proc/kcore`` and ``/proc/kmsg`` (the kernel's memory, a read that blocks).
"""

from __future__ import annotations

import os
import re
import stat
from collections import deque
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "TouchedPath",
    "is_inside",
    "proc_refusal",
    "real_path",
    "relative_subject",
    "special_file_kind",
    "touch",
]

_MAX_LINKS = 40
"""Symlinks followed in one path before it counts as a loop (Linux's own limit)."""

_PROCESS = r"/proc/(?:self|thread-self|\d+)(?:/task/\d+)?"
_SECRET_ENTRIES = (
    "environ",
    "mem",
    "auxv",
    "maps",
    "smaps",
    "smaps_rollup",
    "numa_maps",
    "pagemap",
    "cmdline",
    "stack",
    "syscall",
    "personality",
)
_SECRET = re.compile(rf"{_PROCESS}/(?:{'|'.join(_SECRET_ENTRIES)})\Z")
_OPEN_FILES = re.compile(rf"{_PROCESS}/(?:fd|map_files)(?:/|\Z)")
_OTHER_VIEW = re.compile(r"/proc/(\d+)(?:/task/\d+)?/(?:root|cwd)(?:/|\Z)")
_KERNEL = re.compile(r"/proc/(?:kcore|kmsg)\Z")


def proc_refusal(path: str) -> str | None:
    """Why ``path`` (absolute, normalised) must never be opened by a file tool, or None."""
    if not path.startswith("/proc/"):
        return None
    if _SECRET.match(path):
        return "it is a process's memory, environment or command line (secrets live there)"
    if _OPEN_FILES.match(path):
        return "it goes through a process's open file descriptors"
    other = _OTHER_VIEW.match(path)
    if other and int(other.group(1)) != os.getpid():
        return "it goes through another process's root or working folder"
    if _KERNEL.match(path):
        return "it is the kernel's memory or log"
    return None


def real_path(path: str) -> tuple[str, str | None]:
    """The real location of an absolute path, and why it is refused (or None).

    Like :func:`os.path.realpath` (every symlink followed, dangling ones too,
    ``..`` and ``//`` collapsed), except that each step is checked with
    :func:`proc_refusal`: ``/dev/fd/3`` is refused because it passes through
    ``/proc/<pid>/fd``, although its real path is an ordinary file.
    """
    parts = deque(path.split("/"))
    current = "/"
    links = 0
    refusal = proc_refusal(os.path.normpath(path).replace("//", "/"))
    while parts:
        name = parts.popleft()
        if name in ("", "."):
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        candidate = current.rstrip("/") + "/" + name
        refusal = refusal or proc_refusal(candidate)
        try:
            target = os.readlink(candidate)
        except (OSError, ValueError):  # not a link, missing, unreadable, or a NUL in it
            current = candidate
            continue
        links += 1
        if links > _MAX_LINKS:
            # A loop: the kernel refuses to open it too; keep the text as it is.
            return os.path.normpath("/".join([candidate, *parts])), refusal
        if target.startswith("/"):
            current = "/"
        parts.extendleft(reversed(target.split("/")))
    return current, refusal or proc_refusal(current)


def is_inside(path: str, root: str) -> bool:
    """Whether the absolute ``path`` is ``root`` or below it (both normalised)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def relative_subject(path: str, workspace: str) -> str:
    """An absolute path as rules see it: relative to the workspace inside it, else absolute."""
    if path == workspace:
        return "."
    if is_inside(path, workspace):
        return path[len(workspace.rstrip("/")) + 1 :]
    return path


@dataclass(frozen=True, slots=True)
class TouchedPath:
    """One path a call can reach.

    Attributes:
        given: The argument as the model wrote it.
        lexical: The path as written, normalised (``~`` expanded, ``..`` folded
            as text), relative to the workspace when inside it, else absolute.
        real: Where it really leads, relative to the workspace when inside it,
            else absolute.
        real_abs: The real location, absolute.
        inside: Whether the real location is inside the workspace.
        writes: Whether the call may change it.
        refusal: Why no file tool may touch it (a process secret), or None.
    """

    given: str
    lexical: str
    real: str
    real_abs: str
    inside: bool
    writes: bool
    refusal: str | None

    @property
    def subjects(self) -> tuple[str, ...]:
        """The strings rule patterns are matched against: the real path and the name used."""
        return (self.real,) if self.lexical == self.real else (self.real, self.lexical)


def touch(given: str, workspace: Path, *, writes: bool) -> TouchedPath:
    """Resolve one path argument of a call.

    Args:
        given: The path as the call names it (relative paths start at the workspace).
        workspace: The workspace, already a real path.
        writes: Whether the call may change the path.
    """
    root = str(workspace)
    try:
        expanded = os.path.expanduser(given)
    except (RuntimeError, ValueError):  # "~nobody": the tool refuses it when it runs
        expanded = given
    absolute = expanded if expanded.startswith("/") else root.rstrip("/") + "/" + expanded
    # normpath keeps a leading "//" (POSIX allows it a meaning); Linux gives it none.
    lexical = os.path.normpath(absolute)
    if lexical.startswith("//"):
        lexical = "/" + lexical.lstrip("/")
    real, refusal = real_path(absolute)
    return TouchedPath(
        given=given,
        lexical=relative_subject(lexical, root),
        real=relative_subject(real, root),
        real_abs=real,
        inside=is_inside(real, root),
        writes=writes,
        refusal=refusal,
    )


def special_file_kind(mode: int) -> str:
    """What a file that is neither regular nor a folder is, for messages ("named pipe")."""
    if stat.S_ISFIFO(mode):
        return "named pipe"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return "special file"
