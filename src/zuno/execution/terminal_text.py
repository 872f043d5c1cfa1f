"""What the model reads of a terminal program's output: plain text, as a screen shows it.

An interactive process (:mod:`zuno.execution.pty`) prints colours, cursor
moves, titles and progress bars redrawn with carriage returns. The model is
given the text a screen would end up showing: :class:`TerminalText` drops the
escape sequences and applies carriage returns, backspaces and erase-line within
a line, chunk by chunk as the output arrives.
"""

from __future__ import annotations

import codecs
import re

__all__ = ["TerminalText"]

_ERASE = "\x1f"
"""Stands for an erase-in-line sequence while a line is rebuilt (never left in the text)."""

_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, modes
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: window titles, hyperlinks
    r"|\x1b[PX^_][^\x1b]*\x1b\\"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]"  # two-byte and charset sequences
)
_ERASE_LINE = re.compile(r"\x1b\[[012]?K")
_PARTIAL = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*|[PX^_][^\x1b]*|[ -/]*)?\Z")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1e\x7f]")
_HOLD_MAX = 4096


class TerminalText:
    """Turns what a terminal program prints into plain text, chunk by chunk.

    Decodes UTF-8 (split characters wait for the next chunk), drops escape
    sequences (one cut between chunks waits too), makes ``\\r\\n`` a newline,
    and applies carriage returns, backspaces and erase-line within a line, the
    way a screen would show it.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""

    def feed(self, data: bytes, final: bool = False) -> str:
        """The plain text of the next chunk (``final``: nothing follows)."""
        text = self._held + self._decoder.decode(data, final=final)
        self._held = ""
        if not final:
            partial = _PARTIAL.search(text)
            if partial is not None and len(text) - partial.start() <= _HOLD_MAX:
                self._held = text[partial.start() :]
                text = text[: partial.start()]
            elif text.endswith("\r"):
                self._held, text = "\r", text[:-1]
        text = _ERASE_LINE.sub(_ERASE, text)
        text = _SEQUENCE.sub("", text).replace("\r\n", "\n")
        return "\n".join(_screen_line(line) for line in text.split("\n"))


def _screen_line(line: str) -> str:
    """One line as a screen shows it after its carriage returns and backspaces."""
    if "\r" not in line and "\b" not in line and _ERASE not in line:
        return _CONTROLS.sub("", line)
    cells: list[str] = []
    cursor = 0
    for ch in line:
        if ch == "\r":
            cursor = 0
        elif ch == "\b":
            cursor = max(0, cursor - 1)
        elif ch == _ERASE:
            del cells[cursor:]
        elif ch == "\t" or ch >= " ":
            if cursor < len(cells):
                cells[cursor] = ch
            else:
                cells.append(ch)
            cursor += 1
    return _CONTROLS.sub("", "".join(cells))
