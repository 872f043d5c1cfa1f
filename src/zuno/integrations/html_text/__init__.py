"""HTML made readable for a model: markdown or plain text.

html-to-markdown (a Rust converter) parses the page and writes it: headings,
lists, tables, quotes, ``pre`` fenced with its language, entities, hidden
elements. It was chosen over markdownify, tried on the same tests: markdownify
runs ``<li>`` items together when their end tags are implied, names no
language on fences, and recurses per nesting level (5,000 levels raise
``RecursionError``). Around it, our own part:

- scripts, styles, navigation, forms' controls, embedded media and hidden
  elements are dropped (``exclude_selectors``);
- when the page marks its main content (``<main>``, ``role="main"``, or a
  single ``<article>``) and that part holds real text, only it is shown;
- links are numbered, ``[text][3]`` in markdown and ``text [3]`` in text,
  with the targets listed at the end, resolved against the page's address
  or its ``<base href>`` (:mod:`._marks`);
- a page nested deeper than the converter walks is flattened first (:mod:`._depth`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urljoin

from html_to_markdown import ConversionOptions, PreprocessingOptions, WarningKind, convert

from zuno.integrations.html_text._depth import MAX_DEPTH, flatten
from zuno.integrations.html_text._marks import (
    MAX_LINKS,
    Marker,
    finish,
    main_part,
    one_line,
    without_marks,
)

__all__ = ["MAX_DEPTH", "MAX_LINKS", "HtmlText", "html_to_text", "looks_like_html"]

_HIDING = (("display:", "none"), ("visibility:", "hidden"))

_DROPPED = [
    *("script", "style", "noscript", "template", "svg", "math", "nav", "iframe", "object"),
    *("embed", "canvas", "audio", "video", "map", "button", "select", "textarea", "input"),
    *("dialog", "[hidden]", "[aria-hidden=true]", "[role=navigation]"),
    *(f"[style*='{hide}{gap}{how}']" for hide, how in _HIDING for gap in ("", " ")),
]
# The title and <base href> come from the page's metadata, which the converter
# also writes at the top of markdown as YAML front matter: taken off again.
_FRONT_MATTER = re.compile(r"---\n(?:[^\n]+\n)*?---\n+")
# Whitespace at a link's edges belongs outside it: the converter trims a link's text.
_LINK_LEAD = re.compile(r"(<a\b[^>]*>)(\s+)", re.IGNORECASE)
_LINK_TRAIL = re.compile(r"(\s+)(</a\s*>)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class HtmlText:
    """A page made readable.

    Attributes:
        title: The ``<title>``, whitespace collapsed ("" when there is none).
        text: The rendered body, with the numbered link list at its end.
        links: The link targets, in number order (``links[0]`` is ``[1]``).
        main_only: Whether only the page's marked main content was rendered.
    """

    title: str
    text: str
    links: tuple[str, ...]
    main_only: bool


def looks_like_html(head: str) -> bool:
    """Whether the start of a document looks like HTML (for unlabelled bodies)."""
    start = head.lstrip()[:512].lower()
    return start.startswith(("<!doctype html", "<html", "<head", "<body")) or (
        start.startswith("<") and "<html" in start
    )


def html_to_text(html: str, base_url: str = "", *, markdown: bool = True) -> HtmlText:
    """Render ``html`` as markdown (default) or plain text.

    Args:
        html: The document.
        base_url: Where it came from; relative links are made absolute against
            it (or against the page's ``<base href>``).
        markdown: Markdown when true, plain text otherwise.
    """
    html = _LINK_TRAIL.sub(r"\2\1", _LINK_LEAD.sub(r"\2\1", without_marks(html)))
    options = ConversionOptions(
        output_format="markdown" if markdown else "plain",
        exclude_selectors=_DROPPED,
        # Our own choice of what to drop, not the converter's guesses (it drops
        # a page's <header> and forms in plain text).
        preprocessing=PreprocessingOptions(enabled=False),
        autolinks=False,
        compact_tables=True,
        bullets="-",
    )
    # The binding takes any object with some of the visitor's methods; its typed
    # Protocol lists all forty.
    marker = cast(Any, Marker())
    result = convert(html, options, visitor=marker)
    if any(w.kind == WarningKind.DEPTH_LIMIT_EXCEEDED for w in result.warnings):
        result = convert(flatten(html), options, visitor=marker)
    text = result.content or ""
    if markdown:
        text = _FRONT_MATTER.sub("", text, count=1) if text.startswith("---\n") else text
    document = result.metadata.document
    title = one_line(document.title or "") if document else ""
    base_href = (document.base_href or "").strip() if document else ""
    base = urljoin(base_url, base_href) if base_href else base_url
    main = main_part(text)
    if main is not None:
        shown, links = finish(main, base, markdown)
        # A marked main part with almost no text is a page skeleton filled by
        # scripts, or a misuse of the tag: the whole page says more.
        if len(shown) >= 200:
            return HtmlText(title, _with_links(shown, links, markdown), links, True)
    shown, links = finish(text, base, markdown)
    return HtmlText(title, _with_links(shown, links, markdown), links, False)


def _with_links(text: str, links: tuple[str, ...], markdown: bool) -> str:
    if not links:
        return text
    gap = ": " if markdown else " "
    listed = "\n".join(f"[{i}]{gap}{url}" for i, url in enumerate(links, 1))
    return f"{text}\n\nLinks:\n{listed}" if text else f"Links:\n{listed}"
