"""A text file as lines, remembering what must survive an edit.

An edit must not change what it did not touch: the line endings (LF, CRLF, a
lone CR, or a mix, kept line by line), a UTF-8 byte-order mark, whether the
file ended with a newline, and bytes that are not valid UTF-8 (kept through
``surrogateescape``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["BOM", "TextFile"]

BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte-order mark."""

_BREAK = re.compile(r"(\r\n|\r|\n)")
"""A line break: CRLF, LF, or a CR alone (old Mac files, and stray ones in mixed files)."""


@dataclass(slots=True)
class TextFile:
    """A file's text split into lines without their terminators.

    Attributes:
        lines: The lines, without line terminators.
        eol: The terminator given to new lines: the file's dominant one.
        bom: Whether the file starts with a UTF-8 byte-order mark.
        final_newline: Whether the last line ends with a terminator.
        line_eols: Each line's own terminator, only for files that mix endings
            (LF, CRLF, a lone CR); None when every line uses ``eol``.
    """

    lines: list[str]
    eol: str = "\n"
    bom: bool = False
    final_newline: bool = True
    line_eols: list[str] | None = field(default=None)

    @classmethod
    def decode(cls, data: bytes) -> TextFile:
        """Split file bytes into lines, noting endings, BOM and final newline."""
        bom = data.startswith(BOM)
        text = data[len(BOM) :].decode("utf-8", errors="surrogateescape") if bom else None
        if text is None:
            text = data.decode("utf-8", errors="surrogateescape")
        if not text:
            # An empty file has no ending to keep; new content ends like a normal file.
            return cls([], bom=bom)
        # A lone CR is a line break too (as Codex matches it): "two\rthree" is two lines.
        parts = _BREAK.split(text)
        lines = parts[0::2]
        eols = parts[1::2]
        final_newline = lines[-1] == ""
        if final_newline:
            lines.pop()
        else:
            eols.append("")
        kinds = set(eols[:-1] if not final_newline else eols)
        if len(kinds) <= 1:
            eol = next(iter(kinds), "\n")
            return cls(lines, eol, bom, final_newline)
        counts = {kind: eols.count(kind) for kind in kinds}
        # Ties go to LF, then CRLF: a new line gets the most common ending.
        eol = max(("\n", "\r\n", "\r"), key=lambda kind: counts.get(kind, 0))
        return cls(lines, eol, bom, final_newline, eols)

    @classmethod
    def from_content(cls, content: str) -> TextFile:
        """A new file from text whose lines end in ``\\n`` (an added file)."""
        return cls.decode(content.encode("utf-8", errors="surrogateescape"))

    def with_lines(self, lines: list[str], line_eols: list[str] | None = None) -> TextFile:
        """The same file (endings, BOM, final newline) with other lines."""
        return TextFile(lines, self.eol, self.bom, self.final_newline, line_eols)

    def encode(self) -> bytes:
        """The file's bytes, with its endings, BOM and final-newline state."""
        head = BOM if self.bom else b""
        if not self.lines:
            return head
        if self.line_eols is None:
            text = self.eol.join(self.lines)
            if self.final_newline:
                text += self.eol
        else:
            text = "".join(_with_endings(self.lines, self.line_eols, self.eol))
            text += self.eol if self.final_newline else ""
        return head + text.encode("utf-8", errors="surrogateescape")

    def text(self) -> str:
        """The content with ``\\n`` line endings and no BOM (for display and search)."""
        body = "\n".join(self.lines)
        return body + "\n" if self.lines and self.final_newline else body


def _with_endings(lines: Sequence[str], eols: Sequence[str], default: str) -> list[str]:
    """Lines joined to their own endings; the last one gets none (the caller adds it)."""
    out = [line + (eols[i] or default) for i, line in enumerate(lines[:-1])]
    out.append(lines[-1])
    return out
