"""Nesting flattened for the pages the converter would cut short.

html-to-markdown skips whatever lies deeper than 1,024 elements (with a
warning), losing text a browser shows. Such a page is converted again after
:func:`flatten` unwraps the elements nested deeper than :data:`MAX_DEPTH`.
Tags are found by a pattern, not parsed: a page this deep is malformed or
hostile, and what is owed to it is its text, in order.
"""

from __future__ import annotations

import re

__all__ = ["MAX_DEPTH", "flatten"]

MAX_DEPTH = 150
"""Elements nested deeper than this are unwrapped into their ancestor."""

_TAG = re.compile(r"<(/?)([a-zA-Z][^\s/>]*)[^>]*>")
_VOID = frozenset(
    [
        *("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta"),
        *("param", "source", "track", "wbr"),
    ]
)


def flatten(html: str) -> str:
    """``html`` with the tags of elements nested deeper than :data:`MAX_DEPTH` removed."""
    out: list[str] = []
    open_: list[str] = []  # the open elements' names; those past MAX_DEPTH lose their tags
    count: dict[str, int] = {}  # open elements by name: an end tag closing none costs no search
    last = 0
    for tag in _TAG.finditer(html):
        closing, name = tag.group(1, 2)
        name = name.lower()
        if not closing:
            if name in _VOID or html[tag.end() - 2] == "/":
                continue
            keep = len(open_) < MAX_DEPTH
            open_.append(name)
            count[name] = count.get(name, 0) + 1
        elif count.get(name):
            # An end tag closes its innermost open element and all opened inside it
            # (each element is searched past once: the search removes what it passes).
            at = len(open_) - 1
            while open_[at] != name:
                at -= 1
            keep = at < MAX_DEPTH
            for closed in open_[at:]:
                count[closed] -= 1
            del open_[at:]
        else:
            keep = False  # an end tag that closes nothing
        if not keep:
            out.append(html[last : tag.start()])
            last = tag.end()
    out.append(html[last:])
    return "".join(out)
