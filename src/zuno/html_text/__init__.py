"""HTML made readable: markdown or plain text, with the standard library's parser.

The page is parsed into a small tree (``_tree``: :class:`html.parser.HTMLParser`
does the tokenizing; the common implied end tags of ``p``, ``li``,
``dt``/``dd`` and table rows are applied there), then rendered (``_render``,
writing through ``_writer``; which elements are dropped or blocks is in
``_tags``):

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

from dataclasses import dataclass
from urllib.parse import urljoin

from zuno.html_text._render import MAX_LINKS, Renderer, one_line
from zuno.html_text._tree import MAX_DEPTH, TreeBuilder

__all__ = ["MAX_DEPTH", "MAX_LINKS", "HtmlText", "html_to_text", "looks_like_html"]


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
    tree = TreeBuilder()
    tree.feed(html)
    tree.close()
    base = urljoin(base_url, tree.base_href) if tree.base_href else base_url
    title = one_line(tree.title)
    main = tree.main_node()
    if main is not None:
        rendered = Renderer(base, markdown).document(main)
        # A marked main part with almost no text is a page skeleton filled by
        # scripts, or a misuse of the tag: the whole page says more.
        if len(rendered[0]) >= 200:
            return HtmlText(title, _with_links(*rendered, markdown), rendered[1], True)
    text, links = Renderer(base, markdown).document(tree.root)
    return HtmlText(title, _with_links(text, links, markdown), links, False)


def _with_links(text: str, links: tuple[str, ...], markdown: bool) -> str:
    if not links:
        return text
    if markdown:
        listed = "\n".join(f"[{i}]: {url}" for i, url in enumerate(links, 1))
    else:
        listed = "\n".join(f"[{i}] {url}" for i, url in enumerate(links, 1))
    return f"{text}\n\nLinks:\n{listed}" if text else f"Links:\n{listed}"
