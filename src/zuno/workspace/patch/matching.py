"""Finding a sequence of lines in a file, from exact to forgiving.

Models reproduce file lines imperfectly: trailing spaces lost, indentation
changed, typographic quotes or dashes where the file has ASCII. A search tries
four levels in order and stops at the first level where anything matches, so a
forgiving level never overrides an exact match elsewhere.

Every level keeps an index of where each normalized line occurs, built on
first use. A search starts from the rarest line of the
pattern, so a pattern that begins with a blank line does not visit every blank
line of a large file.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from enum import IntEnum

__all__ = ["LineIndex", "MatchLevel", "ascii_punctuation", "normalize_punctuation"]


class MatchLevel(IntEnum):
    """How forgiving a comparison of two lines is, tried in this order."""

    EXACT = 0
    IGNORE_TRAILING_WHITESPACE = 1
    IGNORE_SURROUNDING_WHITESPACE = 2
    NORMALIZE_PUNCTUATION = 3
    """Also maps typographic dashes, quotes and unusual spaces to ASCII."""


_PUNCTUATION = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\uff07", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\uff02", '"'),
        **dict.fromkeys(
            "\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
            "\u200a\u202f\u205f\u3000",
            " ",
        ),
    }
)


def ascii_punctuation(text: str) -> str:
    """Map typographic dashes, quotes and unusual spaces to ASCII (one char for one)."""
    return text.translate(_PUNCTUATION)


def normalize_punctuation(line: str) -> str:
    """Map typographic dashes, quotes and unusual spaces to ASCII, then strip."""
    return line.translate(_PUNCTUATION).strip()


def _identity(line: str) -> str:
    return line


_NORMALIZERS: dict[MatchLevel, Callable[[str], str]] = {
    MatchLevel.EXACT: _identity,
    MatchLevel.IGNORE_TRAILING_WHITESPACE: str.rstrip,
    MatchLevel.IGNORE_SURROUNDING_WHITESPACE: str.strip,
    MatchLevel.NORMALIZE_PUNCTUATION: normalize_punctuation,
}


class LineIndex:
    """The lines of one file, searchable at every :class:`MatchLevel`.

    The index of a level is the permutation of line numbers sorted by the
    normalized line (a stable sort, so equal lines stay in file order). The
    positions of a line are then one contiguous, ascending run of it, found by
    bisection. Sorting runs in C, several times faster than filling a dict of
    positions line by line on a 100,000-line file.
    """

    def __init__(self, lines: Sequence[str]) -> None:
        self._lines = lines
        self._views: dict[MatchLevel, Sequence[str]] = {MatchLevel.EXACT: lines}
        self._orders: dict[MatchLevel, list[int]] = {}

    def __len__(self) -> int:
        return len(self._lines)

    def find(
        self,
        pattern: Sequence[str],
        start: int,
        level: MatchLevel,
        limit: int = 1,
    ) -> list[int]:
        """Positions at or after ``start`` where ``pattern`` matches at ``level``.

        Args:
            pattern: The lines sought, in order (not empty).
            start: The first position a match may begin at.
            level: How forgiving the comparison is.
            limit: Stop after this many matches.

        Returns:
            Up to ``limit`` starting positions, ascending.
        """
        normalize = _NORMALIZERS[level]
        wanted = [normalize(line) for line in pattern]
        view = self._view(level)
        order = self._order(level)
        spans = [self._span(view, order, line) for line in wanted]
        # Anchor on the rarest line of the pattern: fewest candidates to check.
        anchor = min(range(len(wanted)), key=lambda i: spans[i][1] - spans[i][0])
        low, high = spans[anchor]
        last_start = len(view) - len(wanted)
        found: list[int] = []
        for j in range(bisect_left(order, start + anchor, low, high), high):
            p = order[j] - anchor
            if p > last_start:
                break
            if view[p : p + len(wanted)] == wanted:
                found.append(p)
                if len(found) >= limit:
                    break
        return found

    def matches_at(self, pattern: Sequence[str], position: int, level: MatchLevel) -> bool:
        """Whether ``pattern`` matches exactly at ``position`` at ``level``."""
        if position < 0 or position + len(pattern) > len(self._lines):
            return False
        normalize = _NORMALIZERS[level]
        view = self._view(level)
        return all(view[position + i] == normalize(line) for i, line in enumerate(pattern))

    @staticmethod
    def _span(view: Sequence[str], order: list[int], line: str) -> tuple[int, int]:
        """The run of ``order`` whose lines equal ``line``."""
        low = bisect_left(order, line, key=view.__getitem__)
        high = bisect_right(order, line, low, key=view.__getitem__)
        return low, high

    def _view(self, level: MatchLevel) -> Sequence[str]:
        view = self._views.get(level)
        if view is None:
            normalize = _NORMALIZERS[level]
            view = list(map(normalize, self._lines))
            self._views[level] = view
        return view

    def _order(self, level: MatchLevel) -> list[int]:
        order = self._orders.get(level)
        if order is None:
            order = sorted(range(len(self._lines)), key=self._view(level).__getitem__)
            self._orders[level] = order
        return order
