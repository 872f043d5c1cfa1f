"""The page as a small, forgiving tree, built by the standard library's tokenizer.

:class:`html.parser.HTMLParser` does the tokenizing; the common implied end
tags of ``p``, ``li``, ``dt``/``dd``, table rows and cells are applied here,
and unknown end tags are ignored. Nesting deeper than :data:`MAX_DEPTH` is
flattened, so the tree can be rendered in bounded recursion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

from zuno.html_text._tags import CLOSES_P, VOID

__all__ = ["MAX_DEPTH", "Node", "TreeBuilder"]

MAX_DEPTH = 150
"""Elements nested deeper than this are flattened into their ancestor."""


@dataclass(slots=True, eq=False)
class Node:
    """One element: its tag, attributes, and children (elements and text runs)."""

    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=lambda: [])

    def elements(self) -> list[Node]:
        """The child elements, without the text runs."""
        return [c for c in self.children if isinstance(c, Node)]


class TreeBuilder(HTMLParser):
    """Builds a forgiving tree: unknown end tags are ignored, implied ones applied.

    Attributes:
        root: The document node; fed HTML is added under it.
        title: The text of the first non-empty ``<title>``, as written.
        base_href: The first ``<base href>`` ("" when there is none).
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self._stack: list[Node] = [self.root]
        self.title = ""
        self._in_title = False
        self._title_done = False
        self.base_href = ""
        self._mains: list[Node] = []
        self._articles: list[Node] = []

    def main_node(self) -> Node | None:
        """The element marked as the main content (``<main>``, ``role="main"``, one article)."""
        if self._mains:
            return self._mains[0]
        if len(self._articles) == 1:
            return self._articles[0]
        return None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """Open an element (or add a void one), closing implied ones first."""
        attributes = {k: v or "" for k, v in attrs}
        if tag == "title" and not self._title_done:
            self._in_title = True
        elif tag == "base" and not self.base_href:
            self.base_href = attributes.get("href", "").strip()
        self._close_implied(tag)
        node = Node(tag, attributes)
        if tag in VOID:
            self._stack[-1].children.append(node)
            return
        if len(self._stack) > MAX_DEPTH:
            return  # flattened: its content goes to the deepest kept ancestor
        self._stack[-1].children.append(node)
        self._stack.append(node)
        if tag == "main" or attributes.get("role") == "main":
            self._mains.append(node)
        elif tag == "article":
            self._articles.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        """A self-closing tag: opened and, unless void, closed at once."""
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        """Close the innermost open element of this name (none open: ignored)."""
        if tag == "title":
            self._in_title = False
            self._title_done = self._title_done or bool(self.title.strip())
        if tag == "br":  # a stray </br> is a line break in every browser
            self._stack[-1].children.append(Node("br", {}))
            return
        for i in range(len(self._stack) - 1, 0, -1):
            if self._stack[i].tag == tag:
                del self._stack[i:]
                return

    def handle_data(self, data: str) -> None:
        """Text, added to the innermost open element."""
        if self._in_title:
            self.title += data
        self._stack[-1].children.append(data)

    def _close_implied(self, tag: str) -> None:
        if tag in CLOSES_P and self._stack[-1].tag == "p":
            self._stack.pop()
        elif tag == "li":
            self._close_up_to({"li"}, {"ul", "ol", "menu"})
        elif tag in ("dt", "dd"):
            self._close_up_to({"dt", "dd"}, {"dl"})
        elif tag == "tr":
            self._close_up_to({"tr"}, {"table"})
        elif tag in ("td", "th"):
            self._close_up_to({"td", "th"}, {"tr", "table"})
        elif tag == "option":
            self._close_up_to({"option"}, {"select"})

    def _close_up_to(self, names: set[str], boundary: set[str]) -> None:
        for i in range(len(self._stack) - 1, 0, -1):
            tag = self._stack[i].tag
            if tag in boundary:
                return
            if tag in names:
                del self._stack[i:]
                return
