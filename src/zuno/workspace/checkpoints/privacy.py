"""Which workspace paths checkpoints never read: those a deny rule keeps from ``read``.

A deny rule on reading a path (``{"tool": "*", "pattern": "secrets/**",
"action": "deny"}``) keeps its content out of the shadow store and out of
``zuno diff``: git is told to leave those paths out by exclude pathspecs on every
call that looks at the workspace or compares snapshots (not by ignore lines,
which a ``.gitignore`` of the workspace could override with ``!``), and the
watched path of a snapshot drops them in Python.

The match is wider than the rule, never narrower: a ``*`` of the rule matches
across folders here, and a path lies under a denied one when any of its
parent folders matches. Leaving out a little more only means those files are
not covered by undo.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

__all__ = ["DeniedPaths", "denied_patterns"]

_EVERYTHING = "*"


def denied_patterns(rules: Iterable[object]) -> list[str]:
    """The path patterns of the deny rules that apply to ``read`` (workspace-relative ones).

    Args:
        rules: Permission rules (anything with ``tool``, ``pattern`` and ``action``).
    """
    found: list[str] = []
    for rule in rules:
        action = getattr(rule, "action", None)
        tool = str(getattr(rule, "tool", ""))
        pattern = str(getattr(rule, "pattern", ""))
        if action != "deny" or not (tool == "*" or fnmatchcase("read", tool)):
            continue
        if pattern.startswith(("/", "~")) or not pattern:
            continue  # outside the workspace: never in a checkpoint
        found.append(pattern)
    return sorted(set(found))


def _widened(pattern: str) -> tuple[str, str] | None:
    """A rule pattern as a git pathspec and a regex, both with ``*`` crossing folders."""
    if pattern in ("*", "**"):
        return _EVERYTHING, ".*"
    if pattern.endswith("/**"):
        pattern = pattern[:-3]  # the folder: everything under it goes with it
    spec: list[str] = []
    regex: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            spec.append("*")
            regex.append(".*")
            i += 3
        elif pattern.startswith("**", i) or pattern[i] == "*":
            spec.append("*")
            regex.append(".*")
            i += 2 if pattern.startswith("**", i) else 1
        elif pattern[i] == "?":
            spec.append("?")
            regex.append(".")
            i += 1
        else:
            c = pattern[i]
            spec.append("\\" + c if c in "[]\\" else c)
            regex.append(re.escape(c))
            i += 1
    if not spec:
        return None
    return "".join(spec), "".join(regex)


@dataclass(frozen=True, slots=True)
class DeniedPaths:
    """The workspace paths deny rules keep out of checkpoints (see the module's text)."""

    patterns: tuple[str, ...]

    @classmethod
    def of(cls, patterns: Sequence[str]) -> DeniedPaths:
        """From rule patterns (as :func:`denied_patterns` gives them)."""
        return cls(tuple(sorted(set(patterns))))

    def pathspecs(self) -> list[str]:
        """Exclude pathspecs for git (after an including one such as ``.``)."""
        specs: list[str] = []
        for pattern in self.patterns:
            widened = _widened(pattern)
            if widened is None:
                continue
            spec = widened[0]
            specs.append(f":(exclude,top){spec}")
            if not spec.endswith("*"):
                specs.append(f":(exclude,top){spec}/*")
        return specs

    def covers(self, path: str) -> bool:
        """Whether ``path`` (workspace-relative, ``/``-separated) is left out."""
        if not self.patterns:
            return False
        regex = self._regex()
        parts = path.split("/")
        return any(regex.fullmatch("/".join(parts[:i])) for i in range(1, len(parts) + 1))

    def _regex(self) -> re.Pattern[str]:
        return _compiled(self.patterns)


_cache: dict[tuple[str, ...], re.Pattern[str]] = {}


def _compiled(patterns: tuple[str, ...]) -> re.Pattern[str]:
    found = _cache.get(patterns)
    if found is None:
        parts = [w[1] for p in patterns if (w := _widened(p)) is not None]
        found = re.compile("|".join(f"(?:{p})" for p in parts) if parts else r"(?!)")
        if len(_cache) > 64:
            _cache.clear()
        _cache[patterns] = found
    return found
