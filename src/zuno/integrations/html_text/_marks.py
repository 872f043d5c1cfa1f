"""Marks the converter's visitor leaves in the output, and what is read from them.

Each link's text and raw ``href``, and the output of ``<main>`` (or
``role="main"``) and ``<article>`` elements, are wrapped in characters of
Unicode's private use area (taken out of the page first). Afterwards the main
part is cut out along its marks and the links are numbered in reading order,
so a main part shown alone numbers its own links from 1.
"""

from __future__ import annotations

import re
from typing import TypeAlias
from urllib.parse import urljoin

from html_to_markdown import NodeContext

__all__ = ["MAX_LINKS", "Marker", "finish", "main_part", "one_line", "without_marks"]

MAX_LINKS = 1000
"""Links numbered in one page; later ones are kept as plain text."""

_LINK, _HREF, _END = "\ue000", "\ue001", "\ue002"
_MAIN, _MAIN_END, _ARTICLE, _ARTICLE_END = "\ue003", "\ue004", "\ue005", "\ue006"
_GONE = "\ue007"  # where a link without text was
_ANY_MARK = re.compile("[\ue000-\ue007]")
# The same characters written as references, which the converter would decode.
_MARK_REFERENCE = re.compile(r"&#(?:[xX]0*[eE]00[0-7]|0*5734[4-9]|0*5735[01]);?")
_SURROGATE = re.compile("[\ud800-\udfff]")
_LINK_MARKS = re.compile(
    f"{_LINK}([^{_LINK}{_HREF}{_END}]*){_HREF}([^{_LINK}{_HREF}{_END}]*){_END}"
)
_PARTS = f"{_MAIN}{_MAIN_END}{_ARTICLE}{_ARTICLE_END}{_GONE}"
_PART_MARKS = re.compile(f"\n*[{_PARTS}][{_PARTS}\n]*")
_LOCAL = ("#", "javascript:", "data:")

_Result: TypeAlias = str | dict[str, str]  # "continue", "skip", or {"custom": text}


def one_line(text: str) -> str:
    """``text`` on one line: whitespace runs become single spaces, ends trimmed."""
    return " ".join(text.split())


def without_marks(html: str) -> str:
    """``html`` without the characters used as marks, nor lone surrogates (U+FFFD instead)."""
    return _SURROGATE.sub("\ufffd", _MARK_REFERENCE.sub(" ", _ANY_MARK.sub(" ", html)))


class Marker:
    """The visitor: marks links, the main part and articles; shows images by their alt text."""

    def visit_link(self, _ctx: NodeContext, _href: str, text: str, _title: str) -> _Result:
        """A link's text alone (its target is marked when the element ends)."""
        return {"custom": text}

    def visit_image(self, _ctx: NodeContext, _src: str, alt: str, _title: str) -> _Result:
        """An image is its description; one without any says nothing."""
        alt = one_line(alt)
        return {"custom": f"(image: {alt})"} if alt else "skip"

    def visit_line_break(self, _ctx: NodeContext) -> _Result:
        """A line break is a new line (not markdown's two trailing spaces)."""
        return {"custom": "\n"}

    def visit_element_end(self, ctx: NodeContext, output: str) -> _Result:
        """Wrap links, the main part and articles in marks."""
        tag = ctx.tag_name
        if tag == "a":
            href = ctx.attributes().get("href")
            if href is not None:
                return {"custom": f"{_LINK}{output}{_HREF}{href}{_END}"}
        elif tag == "main" or ctx.attributes().get("role") == "main":
            return {"custom": f"{_MAIN}{output}{_MAIN_END}"}
        elif tag == "article":
            return {"custom": f"{_ARTICLE}{output}{_ARTICLE_END}"}
        return "continue"


def main_part(text: str) -> str | None:
    """The first marked ``<main>`` in ``text``, else its one ``<article>``, else None."""
    start = text.find(_MAIN)
    if start < 0:
        if text.count(_ARTICLE) != 1:
            return None
        return text[text.index(_ARTICLE) + 1 : text.rfind(_ARTICLE_END)]
    depth = 0
    for mark in re.finditer(f"[{_MAIN}{_MAIN_END}]", text[start:]):
        depth += 1 if mark.group() == _MAIN else -1
        if depth == 0:
            return text[start + 1 : start + mark.start()]
    return text[start + 1 :]


def finish(text: str, base: str, markdown: bool) -> tuple[str, tuple[str, ...]]:
    """The text with its links numbered and the marks gone, and the link targets in order.

    Args:
        text: Converted text, with marks.
        base: What relative links are resolved against.
        markdown: ``[text][3]`` when true, ``text [3]`` otherwise.
    """
    numbers: dict[str, int] = {}
    targets: dict[str, str] = {}  # href -> absolute URL ("" when it is not followed)

    def link(found: re.Match[str]) -> str:
        label, href = one_line(found.group(1)), found.group(2)
        if not label:
            return _GONE
        url = targets.get(href)
        if url is None:
            url = targets[href] = _target(base, href)
        if not url:
            return label
        number = numbers.get(url)
        if number is None:
            if len(numbers) >= MAX_LINKS:
                return label
            number = numbers[url] = len(numbers) + 1
        return f"[{_escape_brackets(label)}][{number}]" if markdown else f"{label} [{number}]"

    text = _LINK_MARKS.sub(link, text)
    # A mark on a line of its own leaves a blank line where it was, not three.
    text = _PART_MARKS.sub(lambda m: "\n\n" if "\n" in m.group() else "", text)
    return _ANY_MARK.sub("", text).strip(), tuple(numbers)


def _target(base: str, href: str) -> str:
    """Where ``href`` leads, absolute ("" for a link within the page, a script, or nonsense)."""
    href = href.strip()
    if not href or href.lower().startswith(_LOCAL):
        return ""
    try:
        return urljoin(base, href)
    except ValueError:  # an unclosed IPv6 bracket
        return ""


def _escape_brackets(text: str) -> str:
    return re.sub(r"(?<!\\)([\[\]])", r"\\\1", text)
