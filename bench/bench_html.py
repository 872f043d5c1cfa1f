"""Benchmark of the HTML converter behind ``webfetch``: large pages, old against new.

Run with ``python bench/bench_html.py``. It generates three pages of the kinds
``webfetch`` meets (a documentation page with navigation, sidebar and a long
article; a forum laid out in tables; an encyclopedia page dense with links),
converts each to markdown and to text, and prints the median time of each,
beside html-to-markdown alone (no visitor, no marks: what our part costs).

With ``--old COMMIT`` the hand-written converter that ``html_text`` held at
that commit (for example 96e75df, the last one before html-to-markdown) is
taken out of git into a temporary folder and timed in the same run, round
robin, so that the machine's load falls on both alike.
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from html_to_markdown import ConversionOptions, PreprocessingOptions, convert

from zuno.integrations.html_text import html_to_text

__all__ = ["main"]

_ROUNDS = 7
_WORDS = [
    *("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven"),
    *("wizards", "quietly", "judge"),
]


def _words(i: int, n: int) -> str:
    return " ".join(_WORDS[(i * 7 + k) % len(_WORDS)] for k in range(n))


def _docs_page() -> str:
    nav = "".join(f'<li><a href="/docs/s{i}">Section {i}</a></li>' for i in range(300))
    parts: list[str] = []
    for i in range(400):
        parts.append(
            f'<h2 id="h{i}">Heading {i}</h2><p>{_words(i, 60)} <a href="ref{i}.html">'
            f"see {i}</a> and <code>call_{i}()</code>.</p>"
        )
        if i % 5 == 0:
            parts.append(
                f'<pre><code class="language-python">def f{i}(x):\n'
                f"    return x * {i}\n</code></pre>"
            )
        if i % 7 == 0:
            rows = "".join(f"<tr><td>k{j}</td><td>{_words(j, 4)}</td></tr>" for j in range(8))
            parts.append(f"<table><tr><th>Key</th><th>Meaning</th></tr>{rows}</table>")
        if i % 3 == 0:
            parts.append("<ul>" + "".join(f"<li>{_words(j, 8)}</li>" for j in range(6)) + "</ul>")
    return (
        "<!doctype html><html><head><title>Docs</title><script>var x = 1;</script>"
        f"<style>p {{ color: red }}</style></head><body><nav><ul>{nav}</ul></nav>"
        f"<aside>{_words(1, 200)}</aside><main>{''.join(parts)}</main>"
        "<footer>Footer</footer></body></html>"
    )


def _forum_page() -> str:
    rows = "".join(
        f'<tr class="athing"><td class="title"><span>{i}.</span></td><td>'
        f'<a href="https://news{i}.example/story">{_words(i, 9)}</a> '
        f'<span class="site">(news{i}.example)</span></td></tr>'
        f'<tr><td colspan="2" class="subtext">{i * 3} points by <a href="user?id=u{i}">u{i}</a>'
        f' | <a href="item?id={i}">{i % 90} comments</a></td></tr>'
        for i in range(3000)
    )
    return (
        "<html><head><title>Forum</title></head><body><center><table width='85%'>"
        f"<tr><td><table>{rows}</table></td></tr></table></center></body></html>"
    )


def _wiki_page() -> str:
    paragraphs = "".join(
        "<p>"
        + " ".join(
            f'{_words(i + k, 6)} <a href="/wiki/Topic_{(i * 13 + k) % 2500}">topic {k}</a>'
            f"<sup><a href='#cite{i}_{k}'>[{k}]</a></sup>"
            for k in range(12)
        )
        + "</p>"
        for i in range(500)
    )
    notes = "".join(f"<li id='cite{i}'>{_words(i, 15)}</li>" for i in range(1500))
    return (
        "<html><head><title>Wiki</title><base href='https://wiki.example/'></head><body>"
        f"<div id='content' role='main'><h1>Topic</h1>{paragraphs}<ol>{notes}</ol></div>"
        "</body></html>"
    )


def _old_converter(commit: str, folder: Path) -> Callable[..., object]:
    """The converter ``html_text`` held at ``commit``, imported as ``old_html_text``."""
    package = folder / "old_html_text"
    package.mkdir()
    listing = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{commit}:src/zuno/html_text"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for name in listing:
        source = subprocess.run(
            ["git", "show", f"{commit}:src/zuno/integrations/html_text/{name}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        (package / name).write_text(source.replace("zuno.integrations.html_text", "old_html_text"))
    sys.path.insert(0, str(folder))
    return importlib.import_module("old_html_text").html_to_text


def _library_alone(page: str, _base: str, *, markdown: bool) -> object:
    """html-to-markdown without our visitor and marks: what the visitor costs."""
    options = ConversionOptions(
        output_format="markdown" if markdown else "plain",
        preprocessing=PreprocessingOptions(enabled=False),
    )
    return convert(page, options)


def main() -> None:
    """Print one row per page and format: size, median times, and old / new."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--old", metavar="COMMIT", help="also time html_text as of COMMIT")
    args = parser.parse_args()
    pages = {"docs": _docs_page(), "forum": _forum_page(), "wiki": _wiki_page()}
    with tempfile.TemporaryDirectory() as folder:
        sides: dict[str, Callable[..., object]] = {
            "new": html_to_text,
            "library alone": _library_alone,
        }
        if args.old:
            sides["old"] = _old_converter(args.old, Path(folder))
        print(f"load average at the start: {os.getloadavg()[0]:.2f}")
        print(f"| page | size | format | {' | '.join(sides)} | old / new |")
        print(f"| --- | --- | --- |{' --- |' * len(sides)} --- |")
        for label, page in pages.items():
            for markdown in (True, False):
                times: dict[str, list[float]] = {side: [] for side in sides}
                for _ in range(_ROUNDS):
                    for side, converter in sides.items():
                        start = time.perf_counter()
                        converter(page, "https://site.example/dir/", markdown=markdown)
                        times[side].append(time.perf_counter() - start)
                medians = {side: statistics.median(runs) for side, runs in times.items()}
                ratio = f"{medians['old'] / medians['new']:.1f} x" if "old" in medians else "-"
                cells = " | ".join(f"{m * 1000:,.1f} ms" for m in medians.values())
                kind = "markdown" if markdown else "text"
                print(f"| {label} | {len(page) // 1024} KiB | {kind} | {cells} | {ratio} |")


if __name__ == "__main__":
    main()
