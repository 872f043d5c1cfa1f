"""The HTML vocabulary the converter knows: which elements are void, dropped or blocks."""

from __future__ import annotations

__all__ = ["BLOCKS", "CLOSES_P", "HEADINGS", "PARAGRAPHS", "SKIP", "VOID"]

VOID = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    ]
)
"""Elements that never have content (no end tag)."""

SKIP = frozenset(
    [
        "head",
        "title",
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "math",
        "nav",
        "iframe",
        "object",
        "embed",
        "canvas",
        "audio",
        "video",
        "map",
        "button",
        "select",
        "textarea",
        "input",
        "dialog",
    ]
)
"""Elements dropped with everything inside them."""

HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
"""Heading elements and their levels."""

PARAGRAPHS = frozenset(["p", "address", "figure", "details", "summary", "fieldset", "dl"])
"""Elements set off by a blank line."""

BLOCKS = frozenset(
    [
        "div",
        "section",
        "article",
        "main",
        "header",
        "footer",
        "aside",
        "form",
        "hgroup",
        "figcaption",
        "center",
        "legend",
        "caption",
        "body",
        "html",
        "tr",
        "tbody",
        "thead",
        "tfoot",
    ]
)
"""Elements on lines of their own."""

CLOSES_P = (
    PARAGRAPHS
    | BLOCKS
    | frozenset(HEADINGS)
    | frozenset(["ul", "ol", "dl", "pre", "blockquote", "table", "hr"])
)
"""Elements whose start tag closes an open ``<p>`` that is the innermost element."""
