"""HTML made readable: markdown or plain text, with the standard library's parser.

The page is parsed into a small tree (:class:`html.parser.HTMLParser` does the
tokenizing; the common implied end tags of ``p``, ``li``, ``dt``/``dd`` and
table rows are applied here), then rendered:

- scripts, styles, navigation, forms' controls, embedded media and hidden
  elements are dropped;
- when the page marks its main content (``<main>``, ``role="main"``, or a
  single ``<article>``) and that part holds real text, only it is shown;
- headings become ``#`` lines (markdown) or lines of their own (text);
- links are numbered: ``[text][3]`` in markdown, ``text [3]`` in text, with
  the list of targets at the end, so the prose stays readable;
- ``pre`` blocks keep their whitespace (fenced in markdown, with the language
  when the page names it); lists, tables, quotes and definition lists keep
  their shape.

Nesting deeper than :data:`MAX_DEPTH` is flattened, so any input renders in
bounded recursion.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urljoin

__all__ = ["MAX_DEPTH", "MAX_LINKS", "HtmlText", "html_to_text", "looks_like_html"]

MAX_DEPTH = 150
"""Elements nested deeper than this are flattened into their ancestor."""
MAX_LINKS = 1000
"""Links numbered in one page; later ones are kept as plain text."""

_VOID = frozenset(
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
_SKIP = frozenset(
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
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_PARAGRAPHS = frozenset(["p", "address", "figure", "details", "summary", "fieldset", "dl"])
_BLOCKS = frozenset(
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
# A start tag of one of these closes an open <p> that is the innermost element.
_CLOSES_P = (
    _PARAGRAPHS
    | _BLOCKS
    | frozenset(_HEADINGS)
    | frozenset(["ul", "ol", "dl", "pre", "blockquote", "table", "hr"])
)
_LANGUAGE = re.compile(r"(?:^|\s)(?:language|lang)-([\w+#.-]+)")
_SPACE = re.compile(r"\s+")
_BACKTICKS = re.compile(r"`+")


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
    tree = _TreeBuilder()
    tree.feed(html)
    tree.close()
    base = urljoin(base_url, tree.base_href) if tree.base_href else base_url
    title = _SPACE.sub(" ", tree.title).strip()
    main = tree.main_node()
    if main is not None:
        rendered = _Renderer(base, markdown).document(main)
        # A marked main part with almost no text is a page skeleton filled by
        # scripts, or a misuse of the tag: the whole page says more.
        if len(rendered[0]) >= 200:
            return HtmlText(title, _with_links(*rendered, markdown), rendered[1], True)
    text, links = _Renderer(base, markdown).document(tree.root)
    return HtmlText(title, _with_links(text, links, markdown), links, False)


def _with_links(text: str, links: tuple[str, ...], markdown: bool) -> str:
    if not links:
        return text
    if markdown:
        listed = "\n".join(f"[{i}]: {url}" for i, url in enumerate(links, 1))
    else:
        listed = "\n".join(f"[{i}] {url}" for i, url in enumerate(links, 1))
    return f"{text}\n\nLinks:\n{listed}" if text else f"Links:\n{listed}"


# --- the tree --------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Node:
    tag: str
    attrs: dict[str, str]
    children: list[_Node | str] = field(default_factory=lambda: [])

    def elements(self) -> list[_Node]:
        return [c for c in self.children if isinstance(c, _Node)]


class _TreeBuilder(HTMLParser):
    """Builds a forgiving tree: unknown end tags are ignored, implied ones applied."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = _Node("#document", {})
        self._stack: list[_Node] = [self.root]
        self.title = ""
        self._in_title = False
        self._title_done = False
        self.base_href = ""
        self._mains: list[_Node] = []
        self._articles: list[_Node] = []

    def main_node(self) -> _Node | None:
        if self._mains:
            return self._mains[0]
        if len(self._articles) == 1:
            return self._articles[0]
        return None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        if tag == "title" and not self._title_done:
            self._in_title = True
        elif tag == "base" and not self.base_href:
            self.base_href = attributes.get("href", "").strip()
        self._close_implied(tag)
        node = _Node(tag, attributes)
        if tag in _VOID:
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
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            self._title_done = self._title_done or bool(self.title.strip())
        if tag == "br":  # a stray </br> is a line break in every browser
            self._stack[-1].children.append(_Node("br", {}))
            return
        for i in range(len(self._stack) - 1, 0, -1):
            if self._stack[i].tag == tag:
                del self._stack[i:]
                return

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        self._stack[-1].children.append(data)

    def _close_implied(self, tag: str) -> None:
        if tag in _CLOSES_P and self._stack[-1].tag == "p":
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


# --- rendering -------------------------------------------------------------------


class _Writer:
    """Text built from inline runs and blocks, with collapsed whitespace between."""

    def __init__(self, *, tight: bool = False) -> None:
        self._parts: list[str] = []
        self._newlines = 0
        self._space = False
        self._started = False
        self._line_start = True
        self._gap = 1 if tight else 2

    def inline(self, text: str) -> None:
        """Running text: whitespace collapses to single spaces."""
        if not text:
            return
        words = text.split()
        if text[0].isspace():
            self._space = True
        if words:
            self.atom(" ".join(words))
            self._space = text[-1].isspace()

    def atom(self, text: str, *, space: bool = False) -> None:
        """Text written as is, after a space when one is pending (or ``space``)."""
        if not text:
            return
        self._flush()
        if (self._space or space) and not self._line_start:
            self._parts.append(" ")
        self._parts.append(text)
        self._started = True
        self._line_start = False
        self._space = False

    def space(self) -> None:
        """A space before the next inline text (none at a line start)."""
        self._space = True

    def block(self, text: str, *, gap: int | None = None) -> None:
        """A block kept verbatim, separated from what surrounds it."""
        if not text:
            return
        self.brk(gap or self._gap)
        self._flush()
        self._parts.append(text)
        self._started = True
        self._line_start = False
        self._space = False
        self.brk(gap or self._gap)

    def brk(self, lines: int) -> None:
        """End the current line, leaving ``lines - 1`` blank lines (when text follows)."""
        if self._started:
            self._newlines = max(self._newlines, min(lines, self._gap))
            self._space = False

    def line_break(self) -> None:
        """A hard line break (``<br>``); two in a row leave a blank line."""
        if self._started:
            self._newlines = min(2, self._newlines + 1)
            self._space = False

    def _flush(self) -> None:
        if self._newlines:
            self._parts.append("\n" * self._newlines)
            self._newlines = 0
            self._line_start = True

    def text(self) -> str:
        return "".join(self._parts)


def _one_line(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _hidden(node: _Node) -> bool:
    attrs = node.attrs
    if "hidden" in attrs or attrs.get("aria-hidden", "").lower() == "true":
        return True
    if attrs.get("role", "").lower() == "navigation":
        return True
    style = attrs.get("style", "").replace(" ", "").lower()
    return "display:none" in style or "visibility:hidden" in style


class _Renderer:
    def __init__(self, base_url: str, markdown: bool) -> None:
        self._base = base_url
        self._md = markdown
        self._links: dict[str, int] = {}
        self._handlers: dict[str, Callable[[_Node, _Writer], None]] = {
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

    def document(self, node: _Node) -> tuple[str, tuple[str, ...]]:
        w = _Writer()
        self._children(node, w)
        return w.text().strip(), tuple(self._links)

    def _children(self, node: _Node, w: _Writer) -> None:
        for child in node.children:
            if isinstance(child, str):
                w.inline(child)
            else:
                self._element(child, w)

    def _element(self, node: _Node, w: _Writer) -> None:
        tag = node.tag
        if tag in _SKIP or _hidden(node):
            return
        handler = self._handlers.get(tag)
        if handler is not None:
            handler(node, w)
        elif tag in _HEADINGS:
            text = self._inline_text(node)
            if text:
                w.block(f"{'#' * _HEADINGS[tag]} {text}" if self._md else text, gap=2)
        elif tag in _PARAGRAPHS:
            w.brk(2)
            self._children(node, w)
            w.brk(2)
        elif tag in _BLOCKS:
            w.brk(1)
            self._children(node, w)
            w.brk(1)
        else:
            self._children(node, w)

    def _sub(self, node: _Node, *, tight: bool = False) -> str:
        w = _Writer(tight=tight)
        self._children(node, w)
        return w.text().strip()

    def _inline_text(self, node: _Node) -> str:
        return _one_line(self._sub(node))

    # --- inline elements -----------------------------------------------------------

    def _link(self, node: _Node, w: _Writer) -> None:
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

    def _image(self, node: _Node, w: _Writer) -> None:
        alt = _one_line(node.attrs.get("alt", ""))
        if alt:
            w.atom(f"(image: {alt})")

    def _code(self, node: _Node, w: _Writer) -> None:
        text = _one_line(_plain(node))
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

    def _pre(self, node: _Node, w: _Writer) -> None:
        body = _plain(node).removeprefix("\r\n").removeprefix("\n").rstrip()
        if not body.strip():
            return
        if not self._md:
            w.block(body, gap=2)
            return
        longest = max((len(m) for m in _BACKTICKS.findall(body)), default=0)
        fence = "`" * max(3, longest + 1)
        w.block(f"{fence}{_language(node)}\n{body}\n{fence}", gap=2)

    def _list(self, node: _Node, w: _Writer) -> None:
        ordered = node.tag == "ol"
        number = _start(node) if ordered else 1
        lines: list[str] = []
        for child in node.children:
            if isinstance(child, str):
                item = _one_line(child)
            elif child.tag == "li":
                item = self._sub(child, tight=True)
            else:
                # A nested list or a wrapper (some sites put <li>s inside a <div>):
                # rendered as it is, a nested list indented under the item before.
                other = _Writer(tight=True)
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

    def _orphan_item(self, node: _Node, w: _Writer) -> None:
        item = self._sub(node, tight=True)
        if item:
            w.block(_prefix_first(item, "- ", "  "), gap=1)

    def _quote(self, node: _Node, w: _Writer) -> None:
        inner = self._sub(node)
        if inner:
            w.block(_indent(inner, "> " if self._md else "  ", blank=">" if self._md else ""))

    def _term(self, node: _Node, w: _Writer) -> None:
        text = self._inline_text(node)
        if text:
            w.block(text, gap=1)

    def _definition(self, node: _Node, w: _Writer) -> None:
        inner = self._sub(node, tight=True)
        if inner:
            w.block(_indent(inner, "    " if self._md else "  "), gap=1)

    def _table(self, node: _Node, w: _Writer) -> None:
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
        flat = [[_one_line(c).replace("|", bar) for c in r] for r in cells]
        flat = [r + [""] * (width - len(r)) for r in flat]
        if self._md:
            lines = [f"| {' | '.join(flat[0])} |", f"|{' --- |' * width}"]
            lines += [f"| {' | '.join(r)} |" for r in flat[1:]]
        else:
            lines = [" | ".join(r).rstrip(" |") for r in flat]
        w.block("\n".join(lines))


def _edges(node: _Node) -> tuple[bool, bool]:
    """Whether the text under ``node`` starts and ends with whitespace."""
    text = _plain(node)
    return (text[:1].isspace(), text[-1:].isspace())


def _plain(node: _Node) -> str:
    """The text under ``node`` with its whitespace kept (``br`` as a newline)."""
    out: list[str] = []
    stack: list[_Node | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif item.tag == "br":
            out.append("\n")
        elif item is node or not (item.tag in _SKIP or _hidden(item)):
            stack.extend(reversed(item.children))
    return "".join(out)


def _language(node: _Node) -> str:
    for candidate in (node, *node.elements()[:1]):
        match = _LANGUAGE.search(candidate.attrs.get("class", ""))
        if match:
            return match.group(1)
    return ""


def _start(node: _Node) -> int:
    try:
        return max(0, min(10**9, int(node.attrs.get("start", "1").strip())))
    except ValueError:
        return 1


def _rows(table: _Node) -> list[list[_Node]]:
    """The rows of a table and their cells, not descending into nested tables."""
    rows: list[list[_Node]] = []
    pending: list[_Node] = list(reversed(table.elements()))
    while pending:
        node = pending.pop()
        if node.tag == "tr":
            cells = [c for c in node.elements() if c.tag in ("td", "th")]
            if cells:
                rows.append(cells)
        elif node.tag in ("thead", "tbody", "tfoot"):
            pending.extend(reversed(node.elements()))
    return rows


def _contains(node: _Node, tag: str) -> bool:
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
