"""The HTML to markdown/text conversion behind ``webfetch`` (html-to-markdown, and our marks)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zuno.integrations.html_text import MAX_DEPTH, MAX_LINKS, html_to_text, looks_like_html


def md(html: str, base: str = "https://site.test/dir/page.html") -> str:
    return html_to_text(html, base).text


def text(html: str) -> str:
    return html_to_text(html, "https://site.test/", markdown=False).text


def test_headings_paragraphs_and_line_breaks() -> None:
    out = md("<h2>Title</h2><p>one<br>two</p><p>three   \n  four</p>")
    # The converter keeps a line break of the source inside a paragraph (a soft break).
    assert out == "## Title\n\none\ntwo\n\nthree\nfour"
    assert text("<h2>Title</h2><p>x</p>") == "Title\n\nx"


def test_links_are_numbered_resolved_and_shared() -> None:
    html = (
        '<p><a href="a.html">A</a> and <a href="/b">B</a> and <a href="a.html">A again</a>'
        ' and <a href="#frag">local</a> and <a href="javascript:x()">js</a></p>'
    )
    out = md(html)
    assert out.startswith("[A][1] and [B][2] and [A again][1] and local and js")
    assert out.endswith("Links:\n[1]: https://site.test/dir/a.html\n[2]: https://site.test/b")
    assert text('<a href="/x">X</a>') == "X [1]\n\nLinks:\n[1] https://site.test/x"


def test_base_href_is_honoured() -> None:
    out = md('<head><base href="https://cdn.test/root/"></head><a href="x">X</a>')
    assert "[1]: https://cdn.test/root/x" in out


def test_spaces_around_inline_elements_are_kept() -> None:
    assert md("<p>a<a href='/x'> link </a>b</p>").startswith("a [link][1] b")
    assert md("<p>call <code>f()</code>, then <b>stop</b>.</p>") == "call `f()`, then **stop**."
    assert md("<p>x<a href='/a'><img src=a.png alt='a cat'></a> <img src=b.png>y</p>") == (
        "x[(image: a cat)][1] y\n\nLinks:\n[1]: https://site.test/a"
    )


def test_dropped_elements() -> None:
    html = (
        "<script>S1</script><style>S2</style><noscript>S3</noscript><nav>S4</nav>"
        "<svg><text>S5</text></svg><div hidden>S6</div><p aria-hidden=true>S7</p>"
        "<div style='display: none'>S8</div><div role=navigation>S9</div>"
        "<form><button>S10</button><select><option>S11</select><label>kept</label></form>"
    )
    assert md(html) == "kept"


def test_pre_keeps_whitespace_and_language() -> None:
    html = '<pre class="lang-rust">\nfn main() {\n\tlet x = 1;  \n}\n</pre>'
    assert md(html) == "```rust\nfn main() {\n\tlet x = 1;  \n}\n```"
    assert text(html) == "fn main() {\n\tlet x = 1;\n}"  # text drops spaces ending a line
    tricky = md("<pre>uses ``` inside</pre>")
    assert tricky.startswith("````\n") and tricky.endswith("\n````")


def test_lists_nest_and_number() -> None:
    html = "<ol start=3><li>three<li>four<ul><li>sub a<li>sub b</ul></li><li>five</ol>"
    assert md(html) == "3. three\n4. four\n   - sub a\n   - sub b\n5. five"


def test_tables() -> None:
    html = "<table><tr><th>Name</th><th>Kind</th></tr><tr><td>a|b</td><td>x</td></tr></table>"
    assert md(html) == "| Name | Kind |\n| --- | --- |\n| a\\|b | x |"
    assert text(html) == "Name\tKind\na|b\tx"


def test_tables_used_for_layout_keep_their_text_in_order() -> None:
    html = "<table><tr><td><p>Left column</p></td></tr><tr><td>Right</td></tr></table>"
    assert md(html) == "| Left column |\n| --- |\n| Right |"
    nested = (
        "<table><tr><td><p>Intro.</p><p>More.</p></td>"
        "<td><table><tr><td>inner one</td><td>inner two</td></tr></table></td></tr></table>"
    )
    # Cells holding blocks are written on one line in markdown (the converter's rule),
    # as blocks in text; either way nothing is lost and the order is the page's.
    for out in (md(nested), text(nested)):
        at = [out.index(part) for part in ("Intro.", "More.", "inner one", "inner two")]
        assert at == sorted(at)


def test_blockquote_and_definitions() -> None:
    assert md("<blockquote><p>a</p><p>b</p></blockquote>") == "> a\n>\n> b"
    assert md("<dl><dt>term</dt><dd>meaning</dd></dl><p>after</p>") == "term\n\nmeaning\n\nafter"


def test_main_content_is_preferred_when_it_has_text() -> None:
    body = "word " * 60
    html = f"<header>Site header</header><main><h1>Doc</h1><p>{body}</p></main><footer>F</footer>"
    doc = html_to_text(html)
    assert doc.main_only and doc.text.startswith("# Doc") and "Site header" not in doc.text
    skeleton = html_to_text("<header>Header text</header><main><div id=app></div></main>")
    assert not skeleton.main_only and skeleton.text == "Header text"


def test_main_content_marked_by_role_or_one_article_numbers_its_own_links() -> None:
    body = "word " * 60
    side = "<div><a href='/side'>side link</a> Sidebar</div>"
    role = html_to_text(
        f"{side}<div role=main><p><a href='/in'>in</a> {body}</p></div>", "https://s.test/"
    )
    assert role.main_only and "Sidebar" not in role.text
    assert role.text.startswith("[in][1] word") and role.links == ("https://s.test/in",)
    one = html_to_text(f"{side}<article><p>{body}</p></article>", markdown=False)
    assert one.main_only and one.text.startswith("word word")
    two = html_to_text(f"{side}<article><p>{body}</p></article><article><p>b</p></article>")
    assert not two.main_only and "Sidebar" in two.text


def test_the_mark_characters_in_a_page_are_not_taken_for_marks() -> None:
    page = "<p>\ue000x\ue001/evil\ue002 \ue003<a href='/ok'>ok</a>\ue004\ue005</p>"
    doc = html_to_text(page, "https://s.test/")
    assert doc.links == ("https://s.test/ok",)
    assert doc.text == "x /evil [ok][1]\n\nLinks:\n[1]: https://s.test/ok"
    written = html_to_text(
        "<p>&#xE000;x&#57345;/evil&#xe002 <a href='/ok'>ok</a></p>", "https://s.test/"
    )
    assert written.text == doc.text


def test_title_and_entities() -> None:
    doc = html_to_text("<title> A &amp; B </title><p>caf&eacute; &lt;tag&gt; &#x2603;</p>")
    assert doc.title == "A & B"
    assert doc.text == "café <tag> ☃"


def test_deep_nesting_is_flattened_not_fatal() -> None:
    # The converter skips what lies deeper than 1,024 elements: flattened, the text is kept.
    html = "<div>" * 5000 + "deep text" + "</div>" * 5000
    assert md(html) == "deep text"
    html = "<ul><li>" * (MAX_DEPTH * 2) + "x"
    assert "x" in md(html)
    html = "<p>before</p>" + "<div><b>" * 10_000 + "bottom" + "</b></div>" * 10_000 + "<p>after</p>"
    assert md(html) == "before\n\n**bottom**\n\nafter"
    assert text("<section>" * 100_000 + "the floor") == "the floor"


def test_links_past_the_limit_stay_text() -> None:
    page = "".join(f"<a href='/p{i}'>p{i}</a> " for i in range(MAX_LINKS + 2))
    doc = html_to_text(page, "https://s.test/")
    assert len(doc.links) == MAX_LINKS and doc.links[-1] == f"https://s.test/p{MAX_LINKS - 1}"
    assert f"[p{MAX_LINKS - 1}][{MAX_LINKS}] p{MAX_LINKS} p{MAX_LINKS + 1}\n\nLinks:" in doc.text


def test_any_python_string_converts() -> None:
    # A lone surrogate (a str can hold one; the converter takes UTF-8 only).
    doc = html_to_text("<title>t\ud800</title><p>a\udfffb\x00c</p>")
    assert (doc.title, doc.text) == ("t\ufffd", "a\ufffdbc")


def test_looks_like_html() -> None:
    assert looks_like_html("  <!DOCTYPE html><html>")
    assert looks_like_html("<html lang=en>")
    assert not looks_like_html('{"a": "<html>"}')


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [
                    "<p>",
                    "</p>",
                    "<div>",
                    "</div>",
                    "<ul>",
                    "<li>",
                    "</ul>",
                    "<ol>",
                    "<table>",
                    "<tr>",
                    "<td>",
                    "</table>",
                    "<pre>",
                    "</pre>",
                    "<a href='/x'>",
                    "</a>",
                    "<code>",
                    "</code>",
                    "<br>",
                    "<h1>",
                    "</h1>",
                    "<script>",
                    "</script>",
                    "<blockquote>",
                    "<dl><dt>",
                    "<dd>",
                    "<main>",
                    "</main>",
                    "<img alt='i'>",
                    "&amp;",
                    "&#0;",
                    "<!--",
                    "-->",
                    "<",
                    ">",
                    "`",
                    "|",
                    "[",
                    "]",
                    "<article>",
                    "<div role=main>",
                    "\ue000",
                    "\ue003",
                    "\ue004",
                    "\ud800",
                ]
            ),
            st.text(max_size=12),
        ),
        max_size=40,
    )
)
def test_any_markup_renders_without_error(parts: list[str]) -> None:
    html = "".join(parts)
    for markdown in (True, False):
        doc = html_to_text(html, "https://site.test/", markdown=markdown)
        assert doc.text == doc.text.strip()
        if "<pre" not in html:  # preformatted text keeps its blank lines (and <br>s)
            assert "\n\n\n" not in doc.text
