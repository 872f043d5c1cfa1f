"""Every relative link in README.md and docs/*.md leads somewhere.

A link to a file must name a file of the repository; a link with ``#anchor``
into one of our markdown files must name a heading of that file (as GitHub
makes its anchors). Links to web addresses are not followed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`+[^`]*`+")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines of ``text`` outside fenced code blocks, with their 1-based numbers."""
    lines: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of the markdown file ``path``, repeated names numbered."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if match is None:
            continue
        slug = _slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(path: Path, root: Path) -> list[str]:
    """The relative links of ``path`` that lead nowhere, each with why."""
    broken: list[str] = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in _LINK.findall(_CODE_SPAN.sub("", line)):
            if _EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{number}: {target}"
            if not dest.exists():
                broken.append(f"{where}: no file {file_part}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{where}: no heading #{anchor} in {dest.relative_to(root)}")
    return broken


def test_every_relative_link_in_readme_and_docs_leads_somewhere() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) > 5, pages
    broken = [entry for page in pages for entry in broken_links(page, ROOT)]
    assert broken == [], "\n".join(broken)


def test_a_missing_file_or_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# A page\n\n## Old sessions: `zuno gc`\n\n## Network by host: the egress proxy\n"
    )
    page = tmp_path / "README.md"
    page.write_text(
        "See [gc](docs/a.md#old-sessions-zuno-gc), [top](#intro),\n"
        "[proxy](docs/a.md#network-by-host-the-egress-proxy) and [web](https://example.org/x.md).\n"
        "\n# Intro\n\n"
        "Broken: [gone](docs/b.md), [anchor](docs/a.md#folder-trust).\n\n"
        "```sh\n[not a link](nowhere.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "README.md:6: docs/b.md: no file docs/b.md",
        "README.md:6: docs/a.md#folder-trust: no heading #folder-trust in docs/a.md",
    ]
