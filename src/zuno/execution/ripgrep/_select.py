"""Which files a search looks at: the include glob, hidden files, and exclusions.

The include glob becomes rg file types plus, when the glob names folders, a
check of each listed path (:mod:`zuno.execution.ripgrep._glob`); neither lets through a
file the workspace's ignore files (.gitignore, .ignore, .rgignore) ignore.
Exclusions (what permission rules deny) are negative ``--glob`` overrides,
which beat everything and select nothing, plus a filter on each result
(:class:`Exclusion`). Nothing is written to disk: the options are the same
for every call with the same arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zuno.execution.ripgrep._glob import plan_glob

__all__ = ["Exclusion", "Selection", "selection_args"]


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


@dataclass(frozen=True, slots=True)
class Selection:
    """The rg options choosing the files, and the check rg cannot make itself.

    Attributes:
        args: Options for rg, before the pattern.
        keep: Whether one raw result path (as rg prints it, ``./`` first when
            a folder is searched) stays in the answer; None keeps every one.
    """

    args: list[str]
    keep: Callable[[bytes], bool] | None


def selection_args(
    include: str | None,
    hidden: bool,
    exclusion: Exclusion | None = None,
    *,
    folder: bool = True,
) -> Selection:
    """The rg options and result check choosing which files are searched.

    Args:
        include: Only files this gitignore-style glob matches (relative to the
            folder rg runs in), or all.
        hidden: Also search hidden files and folders (``.git`` stays out).
        exclusion: Paths never searched.
        folder: Whether rg searches a folder; a file named explicitly is
            searched whatever the glob says, as rg does.

    Raises:
        ValueError: ``include`` holds a line break.
        GlobError: ``include`` is malformed.
    """
    args: list[str] = []
    if hidden:
        # rg's --hidden would also descend into .git, which nobody wants searched.
        args += ["--hidden", "--glob", "!.git"]
    for glob in exclusion.globs if exclusion is not None else ():
        args += ["--glob", "!" + glob]
    matches: Callable[[bytes], bool] | None = None
    if include is not None:
        if "\n" in include or "\r" in include:
            raise ValueError("a glob must be a single line")
        plan = plan_glob(include, hidden)
        args += plan.args
        if folder:
            matches = plan.matches
    skip = exclusion.skip if exclusion is not None else None
    return Selection(args, _keep(matches, skip))


def _keep(
    matches: Callable[[bytes], bool] | None, skip: Callable[[str], bool] | None
) -> Callable[[bytes], bool] | None:
    if matches is None and skip is None:
        return None

    def keep(raw: bytes) -> bool:
        relative = raw[2:] if raw.startswith(b"./") else raw
        if matches is not None and not matches(relative):
            return False
        return skip is None or not skip(relative.decode("utf-8", errors="surrogateescape"))

    return keep
