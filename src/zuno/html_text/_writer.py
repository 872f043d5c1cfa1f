"""Text assembled from inline runs and blocks, whitespace collapsed between them."""

from __future__ import annotations

__all__ = ["Writer"]


class Writer:
    """Text built from inline runs and blocks, with collapsed whitespace between.

    Args:
        tight: Separate blocks by a line break rather than a blank line (list
            items, definitions).
    """

    def __init__(self, *, tight: bool = False) -> None:
        self._parts: list[str] = []
        self._newlines = 0
        self._space = False
        self._started = False
        self._line_start = True
        self._gap = 1 if tight else 2

    def inline(self, text: str) -> None:
        """Running text: whitespace collapses to single spaces."""
        if not text:
            return
        words = text.split()
        if text[0].isspace():
            self._space = True
        if words:
            self.atom(" ".join(words))
            self._space = text[-1].isspace()

    def atom(self, text: str, *, space: bool = False) -> None:
        """Text written as is, after a space when one is pending (or ``space``)."""
        if not text:
            return
        self._flush()
        if (self._space or space) and not self._line_start:
            self._parts.append(" ")
        self._parts.append(text)
        self._started = True
        self._line_start = False
        self._space = False

    def space(self) -> None:
        """A space before the next inline text (none at a line start)."""
        self._space = True

    def block(self, text: str, *, gap: int | None = None) -> None:
        """A block kept verbatim, separated from what surrounds it."""
        if not text:
            return
        self.brk(gap or self._gap)
        self._flush()
        self._parts.append(text)
        self._started = True
        self._line_start = False
        self._space = False
        self.brk(gap or self._gap)

    def brk(self, lines: int) -> None:
        """End the current line, leaving ``lines - 1`` blank lines (when text follows)."""
        if self._started:
            self._newlines = max(self._newlines, min(lines, self._gap))
            self._space = False

    def line_break(self) -> None:
        """A hard line break (``<br>``); two in a row leave a blank line."""
        if self._started:
            self._newlines = min(2, self._newlines + 1)
            self._space = False

    def _flush(self) -> None:
        if self._newlines:
            self._parts.append("\n" * self._newlines)
            self._newlines = 0
            self._line_start = True

    def text(self) -> str:
        """What was written so far (pending line breaks and spaces are not)."""
        return "".join(self._parts)
