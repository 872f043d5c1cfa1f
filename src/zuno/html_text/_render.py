"""The tree rendered as markdown or plain text.

Dropped and hidden elements are skipped; headings become ``#`` lines
(markdown) or lines of their own (text); links are numbered, ``[text][3]`` in
markdown and ``text [3]`` in text, their targets made absolute; ``pre`` blocks
keep their whitespace (fenced in markdown, with the language when the page
names it); lists, tables, quotes and definition lists keep their shape. A
table used for layout reads as its cells' blocks, in order.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import urljoin

from zuno.html_text._tags import BLOCKS, HEADINGS, PARAGRAPHS, SKIP
from zuno.html_text._tree import Node
from zuno.html_text._writer import Writer

__all__ = ["MAX_LINKS", "Renderer", "one_line"]

MAX_LINKS = 1000
"""Links numbered in one page; later ones are kept as plain text."""

_LANGUAGE = re.compile(r"(?:^|\s)(?:language|lang)-([\w+#.-]+)")
_SPACE = re.compile(r"\s+")
_BACKTICKS = re.compile(r"`+")


def one_line(text: str) -> str:
    """``text`` on one line: whitespace runs become single spaces, ends trimmed."""
    return _SPACE.sub(" ", text).strip()


def _hidden(node: Node) -> bool:
    attrs = node.attrs
    if "hidden" in attrs or attrs.get("aria-hidden", "").lower() == "true":
        return True
    if attrs.get("role", "").lower() == "navigation":
        return True
    style = attrs.get("style", "").replace(" ", "").lower()
    return "display:none" in style or "visibility:hidden" in style


class Renderer:
    """Renders a tree; one instance per document, as it numbers the links it meets.

    Args:
        base_url: What relative links are resolved against.
        markdown: Markdown when true, plain text otherwise.
    """

    def __init__(self, base_url: str, markdown: bool) -> None:
        self._base = base_url
        self._md = markdown
        self._links: dict[str, int] = {}
        self._handlers: dict[str, Callable[[Node, Writer], None]] = {
            "br": lambda _n, w: w.line_break(),
            "hr": lambda _n, w: w.block("---" if self._md else "----"),
            "pre": self._pre,
            "ul": self._list,
            "ol": self._list,
            "menu": self._list,
            "li": self._orphan_item,
            "blockquote": self._quote,
            "table": self._table,
            "a": self._link,
            "img": self._image,
            "code": self._code,
            "kbd": self._code,
            "samp": self._code,
            "tt": self._code,
            "dt": self._term,
            "dd": self._definition,
        }

    def document(self, node: Node) -> tuple[str, tuple[str, ...]]:
        """The text under ``node``, and the link targets in number order."""
        w = Writer()
        self._children(node, w)
        return w.text().strip(), tuple(self._links)

    def _children(self, node: Node, w: Writer) -> None:
        for child in node.children:
            if isinstance(child, str):
                w.inline(child)
            else:
                self._element(child, w)

    def _element(self, node: Node, w: Writer) -> None:
        tag = node.tag
        if tag in SKIP or _hidden(node):
            return
        handler = self._handlers.get(tag)
        if handler is not None:
            handler(node, w)
        elif tag in HEADINGS:
            text = self._inline_text(node)
            if text:
                w.block(f"{'#' * HEADINGS[tag]} {text}" if self._md else text, gap=2)
        elif tag in PARAGRAPHS:
            w.brk(2)
            self._children(node, w)
            w.brk(2)
        elif tag in BLOCKS:
            w.brk(1)
            self._children(node, w)
            w.brk(1)
        else:
            self._children(node, w)

    def _sub(self, node: Node, *, tight: bool = False) -> str:
        w = Writer(tight=tight)
        self._children(node, w)
        return w.text().strip()

    def _inline_text(self, node: Node) -> str:
        return one_line(self._sub(node))

    # --- inline elements -----------------------------------------------------------

    def _link(self, node: Node, w: Writer) -> None:
        href = node.attrs.get("href", "").strip()
        text = self._inline_text(node)
        if not text:
            return
        lead, trail = _edges(node)
        lowered = href.lower()
        local = not href or href.startswith("#") or lowered.startswith(("javascript:", "data:"))
        number = None if local else self._number(urljoin(self._base, href))
        if number is None:
            w.atom(text, space=lead)
        elif self._md:
            w.atom(f"[{_escape_brackets(text)}][{number}]", space=lead)
        else:
            w.atom(f"{text} [{number}]", space=lead)
        if trail:
            w.space()

    def _number(self, url: str) -> int | None:
        if url not in self._links:
            if len(self._links) >= MAX_LINKS:
                return None
            self._links[url] = len(self._links) + 1
        return self._links[url]

    def _image(self, node: Node, w: Writer) -> None:
        alt = one_line(node.attrs.get("alt", ""))
        if alt:
            w.atom(f"(image: {alt})")

    def _code(self, node: Node, w: Writer) -> None:
        text = one_line(_plain(node))
        if not text:
            return
        lead, trail = _edges(node)
        if self._md:
            longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
            fence = "`" * (longest + 1)
            pad = " " if text.startswith("`") or text.endswith("`") else ""
            text = f"{fence}{pad}{text}{pad}{fence}"
        w.atom(text, space=lead)
        if trail:
            w.space()

    # --- blocks --------------------------------------------------------------------

    def _pre(self, node: Node, w: Writer) -> None:
        body = _plain(node).removeprefix("\r\n").removeprefix("\n").rstrip()
        if not body.strip():
            return
        if not self._md:
            w.block(body, gap=2)
            return
        longest = max((len(m) for m in _BACKTICKS.findall(body)), default=0)
        fence = "`" * max(3, longest + 1)
        w.block(f"{fence}{_language(node)}\n{body}\n{fence}", gap=2)

    def _list(self, node: Node, w: Writer) -> None:
        ordered = node.tag == "ol"
        number = _start(node) if ordered else 1
        lines: list[str] = []
        for child in node.children:
            if isinstance(child, str):
                item = one_line(child)
            elif child.tag == "li":
                item = self._sub(child, tight=True)
            else:
                # A nested list or a wrapper (some sites put <li>s inside a <div>):
                # rendered as it is, a nested list indented under the item before.
                other = Writer(tight=True)
                self._element(child, other)
                text = other.text().strip()
                if text:
                    nested = child.tag in ("ul", "ol") and lines
                    lines.append(_indent(text, "  ") if nested else text)
                continue
            if not item:
                continue
            marker = f"{number}. " if ordered else "- "
            number += 1
            lines.append(_prefix_first(item, marker, " " * len(marker)))
        w.block("\n".join(lines))

    def _orphan_item(self, node: Node, w: Writer) -> None:
        item = self._sub(node, tight=True)
        if item:
            w.block(_prefix_first(item, "- ", "  "), gap=1)

    def _quote(self, node: Node, w: Writer) -> None:
        inner = self._sub(node)
        if inner:
            w.block(_indent(inner, "> " if self._md else "  ", blank=">" if self._md else ""))

    def _term(self, node: Node, w: Writer) -> None:
        text = self._inline_text(node)
        if text:
            w.block(text, gap=1)

    def _definition(self, node: Node, w: Writer) -> None:
        inner = self._sub(node, tight=True)
        if inner:
            w.block(_indent(inner, "    " if self._md else "  "), gap=1)

    def _table(self, node: Node, w: Writer) -> None:
        rows = list(_rows(node))
        cells = [[self._sub(cell) for cell in row] for row in rows]
        layout = (
            not cells
            or max(len(r) for r in cells) < 2
            or any(_contains(row_cell, "table") for row in rows for row_cell in row)
            or any(len(c) > 400 or c.count("\n") > 3 for row in cells for c in row)
        )
        caption = next((c for c in node.elements() if c.tag == "caption"), None)
        if caption is not None:
            w.block(self._inline_text(caption), gap=1)
        if layout:
            # A table used for layout: its cells read best as blocks, in order.
            for row in cells:
                for text in row:
                    w.block(text)
            return
        width = max(len(r) for r in cells)
        bar = "\\|" if self._md else "|"
        flat = [[one_line(c).replace("|", bar) for c in r] for r in cells]
        flat = [r + [""] * (width - len(r)) for r in flat]
        if self._md:
            lines = [f"| {' | '.join(flat[0])} |", f"|{' --- |' * width}"]
            lines += [f"| {' | '.join(r)} |" for r in flat[1:]]
        else:
            lines = [" | ".join(r).rstrip(" |") for r in flat]
        w.block("\n".join(lines))


def _edges(node: Node) -> tuple[bool, bool]:
    """Whether the text under ``node`` starts and ends with whitespace."""
    text = _plain(node)
    return (text[:1].isspace(), text[-1:].isspace())


def _plain(node: Node) -> str:
    """The text under ``node`` with its whitespace kept (``br`` as a newline)."""
    out: list[str] = []
    stack: list[Node | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif item.tag == "br":
            out.append("\n")
        elif item is node or not (item.tag in SKIP or _hidden(item)):
            stack.extend(reversed(item.children))
    return "".join(out)


def _language(node: Node) -> str:
    for candidate in (node, *node.elements()[:1]):
        match = _LANGUAGE.search(candidate.attrs.get("class", ""))
        if match:
            return match.group(1)
    return ""


def _start(node: Node) -> int:
    try:
        return max(0, min(10**9, int(node.attrs.get("start", "1").strip())))
    except ValueError:
        return 1


def _rows(table: Node) -> list[list[Node]]:
    """The rows of a table and their cells, not descending into nested tables."""
    rows: list[list[Node]] = []
    pending: list[Node] = list(reversed(table.elements()))
    while pending:
        node = pending.pop()
        if node.tag == "tr":
            cells = [c for c in node.elements() if c.tag in ("td", "th")]
            if cells:
                rows.append(cells)
        elif node.tag in ("thead", "tbody", "tfoot"):
            pending.extend(reversed(node.elements()))
    return rows


def _contains(node: Node, tag: str) -> bool:
    stack = node.elements()
    while stack:
        item = stack.pop()
        if item.tag == tag:
            return True
        stack.extend(item.elements())
    return False


def _escape_brackets(text: str) -> str:
    return text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def _prefix_first(text: str, first: str, rest: str) -> str:
    lines = text.split("\n")
    out = [first + lines[0]]
    out += [rest + line if line else "" for line in lines[1:]]
    return "\n".join(out)


def _indent(text: str, prefix: str, *, blank: str = "") -> str:
    return "\n".join(prefix + line if line else blank for line in text.split("\n"))
