"""Text a database can hold: the last line of defence before a value is bound to a statement.

Python strings may hold what UTF-8 cannot encode: a lone surrogate (``"\\ud800"``,
from a JSON escape or from bytes decoded with ``surrogateescape``). Bound as is,
such a string makes the driver raise ``UnicodeEncodeError``, and a queued row that
always raises would jam every write after it. PostgreSQL's text also refuses NUL.
Whatever a caller let through is written escaped (``\\ud800``, ``\\x00``), so every
row Zuno writes is encodable and still says what was sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["storable", "storable_params"]


def storable(text: str, *, nul: bool = False) -> str:
    """``text`` with lone surrogates escaped (and NUL, when ``nul``): always valid UTF-8."""
    if nul and "\x00" in text:
        text = text.replace("\x00", "\\x00")
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def storable_params(params: Sequence[Any], *, nul: bool = False) -> Sequence[Any]:
    """The parameters of one statement, each string made :func:`storable`.

    The common case (nothing to escape) returns ``params`` itself, unchanged.
    """
    for value in params:
        if isinstance(value, str) and (not value.isascii() or (nul and "\x00" in value)):
            break
    else:
        return params
    return tuple(storable(v, nul=nul) if isinstance(v, str) else v for v in params)
