"""Which files a search looks at: the include glob, hidden files, and exclusions.

rg's ``--glob`` is an *override*: a file it matches is searched even when a
``.gitignore`` ignores it or it is hidden, so ``--glob '*'`` walked ``.git/``
and ``node_modules/``. The include glob is therefore given to rg as an ignore
file of the lowest precedence instead (the same gitignore syntax)::

    *            ignore everything...
    !*/          ...but walk into every folder...
    !GLOB        ...and keep the files GLOB matches;
    .*           hidden entries stay out (unless asked for).

The workspace's own ignore files (.gitignore, .ignore, .rgignore) take
precedence over it, so what they ignore stays ignored. Exclusions (what
permission rules deny) are negative overrides, which beat everything, plus a
filter on each result (:class:`Exclusion`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["Exclusion", "plain_message", "selection_args"]

_CHECK = "!/.zuno-glob-check/"
"""Prefix of an exclusion that can match nothing: rg parses the include glob in it
and refuses a broken one out loud (a broken line of an ignore file is dropped silently)."""


@dataclass(frozen=True, slots=True)
class Exclusion:
    """Paths a search must never return.

    Attributes:
        globs: gitignore-style globs, anchored at the searched folder when they
            start with ``/``; rg skips what they match without reading it.
        skip: Called with each result's path relative to the searched folder
            (``/``-separated); True drops it. The second line of defence, for
            what the globs cannot express.
    """

    globs: tuple[str, ...] = ()
    skip: Callable[[str], bool] | None = None


def _ignore_line(glob: str) -> str:
    """A glob as one whitelisting line of an ignore file, with gitignore's syntax escaped."""
    if "\n" in glob or "\r" in glob:
        raise ValueError("a glob must be a single line")
    if glob.startswith(("#", "!")):
        glob = "\\" + glob  # a literal "#" or "!", not a comment or a negation
    if glob.endswith(" "):
        glob = glob[:-1] + "\\ "  # gitignore drops unescaped trailing spaces
    return "!" + glob


@contextmanager
def selection_args(
    include: str | None, hidden: bool, exclusion: Exclusion | None = None
) -> Generator[list[str]]:
    """The rg options choosing which files are searched, valid inside the ``with``.

    Args:
        include: Only files this gitignore-style glob matches (relative to the
            folder rg runs in), or all.
        hidden: Also search hidden files and folders (``.git`` stays out).
        exclusion: Paths never searched.

    Raises:
        ValueError: ``include`` holds a line break.
    """
    args: list[str] = []
    if hidden:
        # rg's --hidden would also descend into .git, which nobody wants searched.
        args += ["--hidden", "--glob", "!.git"]
    for glob in exclusion.globs if exclusion is not None else ():
        args += ["--glob", "!" + glob]
    if include is None:
        yield args
        return
    args += ["--glob", _CHECK + include.lstrip("/")]
    lines = ["*", "!*/", _ignore_line(include)]
    if not hidden:
        lines.append(".*")
    fd, path = tempfile.mkstemp(prefix="zuno-rg-", suffix=".ignore")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write("\n".join(lines) + "\n")
        yield [*args, "--ignore-file", path]
    finally:
        os.unlink(path)


def plain_message(message: str) -> str:
    """rg's complaint about a glob, naming the glob as the caller wrote it."""
    return message.replace(_CHECK, "")
