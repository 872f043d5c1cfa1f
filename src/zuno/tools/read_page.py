"""One page of a ``read``: the lines (or folder entries) it found, and how they are shown.

A read fills a :class:`Page` (from a text file, :mod:`zuno.tools.read_lines`,
or a folder's entries) and :func:`render_page` numbers its lines and adds at
most one footer line (where to continue, the notes), fitted to the output
limits by dropping whole lines from the end so the next offset stays exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from zuno.contract.tool import ToolContext

__all__ = ["Page", "past_end_message", "render_page", "shown_path"]


@dataclass(slots=True)
class Page:
    """What one read produced, before it is rendered."""

    lines: list[str] = field(default_factory=lambda: [])
    first: int = 1
    more: bool = False
    total: int | None = None
    notes: list[str] = field(default_factory=lambda: [])
    unit: str = "Lines"


def render_page(page: Page, ctx: ToolContext) -> str:
    """Numbered lines plus at most one footer line, fitted to the output limits."""
    numbered = page.unit == "Lines"
    width = len(str(page.first + max(0, len(page.lines) - 1)))
    # A lone CR broke a line: the rest is shown under it, unnumbered.
    under = "\n" + " " * width + "\t"
    rendered = [
        f"{page.first + i:>{width}}\t{line.replace(chr(10), under)}" if numbered else line
        for i, line in enumerate(page.lines)
    ]
    sizes = [len(r.encode("utf-8", "replace")) + 1 for r in rendered]
    used = sum(sizes)
    while True:
        footer = _footer(page)
        lines_needed = len(rendered) + (1 if footer else 0)
        bytes_needed = used + len(footer.encode("utf-8"))
        fits = lines_needed <= ctx.limits.max_lines and bytes_needed <= ctx.limits.max_bytes
        if fits or len(rendered) <= 1:
            break
        # Drop whole lines from the end, so the next offset stays exact.
        rendered.pop()
        page.lines.pop()
        used -= sizes.pop()
        page.more = True
    body = "\n".join(rendered)
    return f"{body}\n{footer}" if footer else body


def _footer(page: Page) -> str:
    parts: list[str] = []
    if page.more:
        last = page.first + len(page.lines) - 1
        of = f" of {page.total}" if page.total is not None else ""
        remain = f"{page.total - last} more" if page.total is not None else "More"
        parts.append(
            f"{page.unit} {page.first}-{last}{of} shown. {remain} remain: "
            f"call read again with offset={last + 1}."
        )
    parts.extend(page.notes)
    return f"[{' '.join(parts)}]" if parts else ""


def past_end_message(shown: str, offset: int, page: Page) -> str:
    """Why ``offset`` found nothing in ``shown``, and which offsets would."""
    unit = page.unit.lower()
    total = page.total
    if total is None:
        return f"offset {offset} is past the end of {shown}"
    if total == 0:
        return f"{shown} has no {unit}; offset {offset} is past its end"
    return (
        f"offset {offset} is past the end of {shown}, which has {total} {unit}; "
        f"use an offset from 1 to {total}"
    )


def shown_path(path: Path, workspace: Path) -> str:
    """A path as the model should see it: relative inside the workspace."""
    try:
        rel = path.relative_to(workspace)
    except ValueError:
        return str(path)
    return rel.as_posix() if rel.parts else "."
