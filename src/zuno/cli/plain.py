"""What ``zuno tools`` and ``zuno call`` print for a program or a pipe, without rich.

Importing rich's console costs tens of milliseconds, and for output that is
not a terminal it only passes text through: no colours, no wrapping. So when
rich would see no terminal (:func:`is_plain`), these commands write the same
lines themselves. A call's output is written exactly as the tool produced it
(rich would expand tabs, drop carriage returns and turn ``:x:`` into an emoji).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TextIO

# Nothing from the runtime at import: main() asks is_plain() before parsing `--help`.
if TYPE_CHECKING:
    from collections.abc import Mapping

    from zuno.dispatch.dispatcher import CallResult
    from zuno.dispatch.registry import Surface
    from zuno.integrations.mcp.errors import McpServerError

__all__ = [
    "SURFACE_HEADERS",
    "is_plain",
    "surface_json",
    "surface_notes",
    "surface_rows",
    "surface_table_notes",
    "surface_table_rows",
    "write_result",
    "write_table",
]

SURFACE_HEADERS = ["tool", "place", "effect", "replay", "concurrency", "summary"]
"""The columns of the ``zuno tools`` table."""


def is_plain(stream: Any) -> bool:
    """Whether rich would write to ``stream`` as to a file, not a terminal.

    The same test as rich's ``Console.is_terminal`` (``TTY_COMPATIBLE``,
    ``FORCE_COLOR``, ``isatty``); when in doubt, not plain, and rich decides.
    """
    compatible = os.environ.get("TTY_COMPATIBLE", "")
    if compatible == "0":
        return True
    if compatible == "1" or os.environ.get("FORCE_COLOR") is not None:
        return False
    try:
        return not stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed: rich says not a terminal
        return True


def surface_json(
    surface: Surface, agent: str, mcp_failures: Mapping[str, McpServerError] | None = None
) -> dict[str, Any]:
    """``zuno tools --json``: the active tools' rows, the tools withheld with the reason,
    and the configured MCP servers that failed to start, with why."""
    return {
        "agent": agent,
        "tools": surface_rows(surface),
        "withheld": [{"name": name, "reason": reason} for name, reason in surface.withheld],
        "mcp_failures": [
            {"server": name, "error": error.summary} for name, error in (mcp_failures or {}).items()
        ],
    }


def surface_rows(surface: Surface, *, parameters: bool = True) -> list[dict[str, Any]]:
    """The active surface as plain rows (``zuno tools --json``).

    ``parameters=False`` leaves out each tool's JSON Schema: building it is
    most of the cost of a listing, and the table does not show it.
    """
    from zuno.dispatch.registry import place_of

    rows: list[dict[str, Any]] = []
    for tool in surface.described():
        decl = tool.declaration.as_dict()
        row: dict[str, Any] = {
            "name": tool.name,
            "place": place_of(tool.name).value,
            **decl,
            "mixed": tool.mixed,
            "description": _summary(tool.description),
        }
        choice: Any = getattr(
            tool, "choice", None
        )  # an MCP server's tool (zuno.integrations.mcp.remote)
        if choice is not None:
            # Why the declaration is this one, and which of the server's hints were not believed.
            row["declared_by"] = choice.source
            row["notes"] = list(choice.notes)
        if parameters:
            row["parameters"] = tool.schema()
        rows.append(row)
    return rows


def surface_table_rows(surface: Surface) -> list[list[str]]:
    """The cells of the ``zuno tools`` table (``*``: the tool classifies each call)."""
    return [
        [
            row["name"],
            row["place"],
            row["effect"] + ("*" if row["mixed"] else ""),
            row["replay"],
            row["concurrency"],
            row["description"],
        ]
        for row in surface_rows(surface, parameters=False)
    ]


def surface_table_notes(surface: Surface) -> list[str]:
    """One line per MCP server tool: what decided its declaration, and the hints not believed."""
    lines: list[str] = []
    for tool in surface.described():
        choice: Any = getattr(
            tool, "choice", None
        )  # an MCP server's tool (zuno.integrations.mcp.remote)
        if choice is not None:
            why = "; ".join([f"declared by {choice.source}", *choice.notes])
            lines.append(f"{tool.name}: {why}")
    return lines


def surface_notes(
    surface: Surface,
    rows: list[list[str]],
    mcp_failures: Mapping[str, McpServerError] | None = None,
) -> str | None:
    """The lines under the ``zuno tools`` table: what ``*`` means, what is withheld and why,
    how each MCP tool's declaration was chosen, and which MCP servers failed to start."""
    notes: list[str] = surface_table_notes(surface)
    if any(r[2].endswith("*") for r in rows):
        notes.append(
            "* mixed: the tool classifies each call from its arguments "
            "(the declaration shown is its default)"
        )
    # A tool the agent would have but that needs setting up first: say what to set.
    notes += [f"not offered: {name} ({reason})" for name, reason in surface.withheld]
    notes += [
        f"not offered: the tools of MCP server {name!r}, which {error.reason}"
        for name, error in (mcp_failures or {}).items()
    ]
    return "\n".join(notes) or None


def write_table(
    stream: TextIO, title: str, headers: list[str], rows: list[list[str]], note: str | None
) -> None:
    """Aligned lines, the last column unpadded, nothing cut (as ``print_table`` off a terminal)."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers) - 1)]
    lines = [title]
    for r in [headers, *rows]:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, r[-1]]).rstrip())
    if note:
        lines.append(note)
    stream.write("\n".join(lines) + "\n")


def write_result(stream: TextIO, result: CallResult) -> None:
    """A call's header line (tool, declaration, outcome, id) and its output as it is."""
    decl = result.declaration.as_dict() if result.declaration else {}
    kind = f": {result.block_kind.value}" if result.block_kind else ""
    declared = "/".join(decl.get(k, "-") for k in ("effect", "replay", "concurrency"))
    stream.write(
        f"{result.tool} [{declared}] {result.outcome.value}{kind}"
        f"  {result.call_id} attempt {result.attempt}\n{result.output}\n"
    )


def _summary(description: str) -> str:
    """The first sentence of a description."""
    text = " ".join(description.split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]
