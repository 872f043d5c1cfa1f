"""Sentences around quoted words: one full stop at the end, never two.

Error texts often quote someone else's words (a provider's message, a
server's error body, a tool's reason) and then go on. Those words may already
end a sentence; :func:`full_stop` ends them once.
"""

from __future__ import annotations

__all__ = ["full_stop"]

_ENDS = (".", "!", "?")


def full_stop(text: str) -> str:
    """``text`` ending one sentence: a final ``.`` added unless it ends with ``.``, ``!`` or ``?``.

    Trailing whitespace is dropped first; an empty text stays empty.
    """
    text = text.rstrip()
    if not text or text.endswith(_ENDS):
        return text
    return text + "."
