"""Driving the official ``rg`` executable: locating it, invoking it, decoding it.

Zuno never walks a tree or matches a regex itself. ``glob`` and ``grep`` run
ripgrep 14 or newer; this package contributes only what rg does not give us:

- locating it (``_locate``: :func:`find_ripgrep`): ``$ZUNO_RG`` if set, else
  the ``rg`` of the running environment (the ``ripgrep`` wheel installs it
  beside the interpreter), else ``PATH``. A missing or too-old rg raises
  :class:`RipgrepUnavailable`; there is no slower fallback walker, on purpose.
- typed, cancellable invocation (``_run``: :meth:`Ripgrep.stream`): output is
  decoded record by record as it arrives and rg is killed as soon as the
  caller has enough, or when the surrounding task is cancelled.
- the include glob (``_glob``, ``_select``): rg file types plus, for globs
  naming folders, a path regex with rg's glob rules, so that files the ignore
  files ignore stay out (rg's own ``--glob`` would list them);
- stable ordering (``_search``: the searches): every answer is sorted by path
  (component by component, as ``rg --sort path`` orders them) and then by
  line, whatever order rg's threads finished in, and the first *limit*
  results are the same on every run.

Why not ``rg --sort path``: it makes rg single-threaded (about 2x slower on the
Python stdlib). Instead rg runs multi-threaded and the results are sorted here,
keeping only the smallest *limit* keys in memory. For line searches that means
two passes: a cheap ``--count`` pass over the whole tree picks the files that
hold the first *limit* matches in path order, then a ``--json`` pass reads
lines from those files only, and is killed once every file has given its
share. The second pass is small unless the limit is. Should files change
between the passes, a file still gives no more lines than the first pass
counted, so the answer stays within the limit.

Exceptions::

    RipgrepUnavailable  rg is missing or older than 14 (a startup error)
    RipgrepError        rg refused the search: an invalid regex or glob
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zuno.core.lazy_names import lazy_names

# Public names load on first use (see zuno.core.lazy_names): a command that only
# names RipgrepUnavailable must not import the search machinery.
if TYPE_CHECKING:
    from zuno.execution.ripgrep._locate import (
        INSTALL_HINT,
        MINIMUM_VERSION,
        RipgrepUnavailable,
        find_ripgrep,
        parse_version,
    )
    from zuno.execution.ripgrep._run import Ripgrep, StreamExit
    from zuno.execution.ripgrep._search import (
        FileCount,
        Line,
        Query,
        RipgrepError,
        SearchResult,
        count_matches,
        files_with_matches,
        list_files,
        search_lines,
    )
    from zuno.execution.ripgrep._select import Exclusion

__all__ = [
    "INSTALL_HINT",
    "MINIMUM_VERSION",
    "Exclusion",
    "FileCount",
    "Line",
    "Query",
    "Ripgrep",
    "RipgrepError",
    "RipgrepUnavailable",
    "SearchResult",
    "StreamExit",
    "count_matches",
    "files_with_matches",
    "find_ripgrep",
    "list_files",
    "parse_version",
    "search_lines",
]

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "INSTALL_HINT": "zuno.execution.ripgrep._locate",
        "MINIMUM_VERSION": "zuno.execution.ripgrep._locate",
        "Exclusion": "zuno.execution.ripgrep._select",
        "FileCount": "zuno.execution.ripgrep._search",
        "Line": "zuno.execution.ripgrep._search",
        "Query": "zuno.execution.ripgrep._search",
        "Ripgrep": "zuno.execution.ripgrep._run",
        "RipgrepError": "zuno.execution.ripgrep._search",
        "RipgrepUnavailable": "zuno.execution.ripgrep._locate",
        "SearchResult": "zuno.execution.ripgrep._search",
        "StreamExit": "zuno.execution.ripgrep._run",
        "count_matches": "zuno.execution.ripgrep._search",
        "files_with_matches": "zuno.execution.ripgrep._search",
        "find_ripgrep": "zuno.execution.ripgrep._locate",
        "list_files": "zuno.execution.ripgrep._search",
        "parse_version": "zuno.execution.ripgrep._locate",
        "search_lines": "zuno.execution.ripgrep._search",
    },
)
