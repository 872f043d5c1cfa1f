"""How transcripts, surfaces and results look in a terminal."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from zuno.dispatch import CallResult
from zuno.registry import Surface, place_of
from zuno.store.records import CallRecord, EventRecord, SessionRecord, iso
from zuno.workers import runner_running

__all__ = [
    "NotRun",
    "calls_not_run",
    "outcome_style",
    "print_result",
    "print_sessions",
    "print_surface",
    "print_table",
    "print_transcript",
]

_STYLES = {"ok": "green", "error": "red", "blocked": "yellow", "uncertain": "magenta"}


def outcome_style(outcome: str | None) -> str:
    return _STYLES.get(outcome or "", "white")


def surface_rows(surface: Surface) -> list[dict[str, Any]]:
    """The active surface as plain rows (``zuno tools --json``)."""
    rows: list[dict[str, Any]] = []
    for tool in surface.tools:
        decl = tool.declaration.as_dict()
        rows.append(
            {
                "name": tool.name,
                "place": place_of(tool.name).value,
                **decl,
                "mixed": tool.mixed,
                "description": _summary(tool.description),
                "parameters": tool.schema(),
            }
        )
    return rows


def _summary(description: str) -> str:
    """The first sentence of a description."""
    text = " ".join(description.split())
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def print_table(
    console: Console,
    title: str,
    headers: list[str],
    rows: list[list[str]],
    note: str | None = None,
) -> None:
    """A table on a terminal; aligned plain lines otherwise, so nothing is ever cut.

    The last column is the one that wraps on a terminal (and is left unpadded
    in plain lines).
    """
    if not console.is_terminal:
        widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers) - 1)]
        console.print(title, markup=False, highlight=False)
        for r in [headers, *rows]:
            cells = [c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)]
            console.print("  ".join([*cells, r[-1]]).rstrip(), markup=False, highlight=False)
        if note:
            console.print(note, markup=False, highlight=False)
        return
    table = Table(title=title, title_justify="left", caption=note, caption_justify="left")
    for column in headers[:-1]:
        table.add_column(column, no_wrap=True)
    table.add_column(headers[-1], ratio=1)
    for r in rows:
        table.add_row(*r)
    console.print(table)


def print_surface(console: Console, surface: Surface, agent: str) -> None:
    rows = [
        [
            row["name"],
            row["place"],
            row["effect"] + ("*" if row["mixed"] else ""),
            row["replay"],
            row["concurrency"],
            row["description"],
        ]
        for row in surface_rows(surface)
    ]
    mixed = any(r[2].endswith("*") for r in rows)
    print_table(
        console,
        f"Active tools for agent {agent!r}",
        ["tool", "place", "effect", "replay", "concurrency", "summary"],
        rows,
        note=(
            "* mixed: the tool classifies each call from its arguments "
            "(the declaration shown is its default)"
            if mixed
            else None
        ),
    )


def print_result(console: Console, result: CallResult) -> None:
    decl = result.declaration.as_dict() if result.declaration else {}
    kind = f": {result.block_kind.value}" if result.block_kind else ""
    header = Text.assemble(
        (f"{result.tool} ", "bold"),
        (
            "[" + "/".join(decl.get(k, "-") for k in ("effect", "replay", "concurrency")) + "] ",
            "dim",
        ),
        (f"{result.outcome.value}{kind}", outcome_style(result.outcome.value)),
        (f"  {result.call_id} attempt {result.attempt}", "dim"),
    )
    console.print(header, highlight=False)
    console.print(result.output, markup=False, highlight=False)


def print_sessions(console: Console, sessions: list[SessionRecord]) -> None:
    print_table(
        console,
        "Sessions (newest first)",
        ["session", "created", "agent", "calls", "parent call"],
        [
            [s.session_id, iso(s.created_at) or "", s.agent, str(s.calls), s.parent_call_id or ""]
            for s in sessions
        ],
    )


@dataclass(frozen=True, slots=True)
class NotRun:
    """A call a step asked for that has no row: it never started."""

    step: int
    index: int
    tool: str
    arguments: str
    running: bool
    """The process running the step is alive: the call may still start."""

    @property
    def status(self) -> str:
        if self.running:
            return "not started yet (its step is still running)"
        return "not run: the run stopped before this call started"

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "index": self.index,
            "tool": self.tool,
            "arguments": self.arguments,
            "status": "not_started" if self.running else "not_run",
        }


def calls_not_run(events: Sequence[EventRecord], calls: Sequence[CallRecord]) -> list[NotRun]:
    """The calls each step asked for (its ``dispatch.started`` event) that have no row.

    Steps recorded before the opening event kept its calls name them by count only.
    """
    have = {(c.step, c.index) for c in calls}
    missing: list[NotRun] = []
    for event in events:
        step = event.data.get("step")
        if event.kind != "dispatch.started" or not isinstance(step, int):
            continue
        asked: list[Any] = event.data.get("requests") or [{}] * int(event.data.get("calls", 0))
        running = runner_running(event.data.get("runner"))
        for index, request in enumerate(asked):
            if (step, index) not in have:
                missing.append(
                    NotRun(
                        step,
                        index,
                        str(request.get("tool", "(not recorded)")),
                        str(request.get("arguments", "")),
                        running,
                    )
                )
    return missing


def print_transcript(
    console: Console,
    session: SessionRecord,
    calls: list[CallRecord],
    children: list[SessionRecord],
    not_run: Sequence[NotRun] = (),
) -> None:
    console.print(
        Text.assemble(
            ("Session ", "bold"),
            (session.session_id, "bold cyan"),
            f"  agent {session.agent}  created {iso(session.created_at)}"
            f"  workspace {session.workspace}",
        )
    )
    if session.parent_call_id:
        console.print(f"  delegated by call {session.parent_call_id}", style="dim")
    step = None
    entries: list[CallRecord | NotRun] = sorted(
        [*calls, *not_run],
        key=lambda e: (e.step, e.index, e.attempt if isinstance(e, CallRecord) else 0),
    )
    for c in entries:
        if c.step != step:
            step = c.step
            console.print(Text(f"\nstep {step}", style="bold"))
        if isinstance(c, NotRun):
            console.print(
                Text.assemble(f"  #{c.index} ", (c.tool, "bold"), ("  " + c.status, "yellow")),
                highlight=False,
            )
            console.print(Text(f"     args: {c.arguments}", style="dim"), highlight=False)
            continue
        kind = f": {c.block_kind}" if c.block_kind else ""
        decl = f"{c.effect or '-'}/{c.replay or '-'}/{c.concurrency or '-'}"
        status = c.outcome or "started (no result: outcome unknown)"
        console.print(
            Text.assemble(
                f"  #{c.index} ",
                (c.tool, "bold"),
                (f" [{decl}] ", "dim"),
                (f"{status}{kind}", outcome_style(c.outcome)),
                (f"  attempt {c.attempt}  {c.call_id}", "dim"),
                (f"  {iso(c.started_at)} -> {iso(c.finished_at) or '?'}", "dim"),
            ),
            highlight=False,
        )
        args = c.arguments if len(c.arguments) <= 200 else c.arguments[:197] + "..."
        console.print(Text(f"     args: {args}", style="dim"), highlight=False)
        if c.result:
            first = c.result.strip().splitlines()[:6]
            more = len(c.result.strip().splitlines()) - len(first)
            for line in first:
                shown = line if len(line) <= 200 else line[:199] + "…"
                console.print(Text(f"     {shown}"), highlight=False)
            if more > 0:
                console.print(Text(f"     ... {more} more lines", style="dim"))
    if children:
        console.print(Text("\nchild sessions:", style="bold"))
        for child in children:
            console.print(
                f"  {child.session_id} (agent {child.agent}) from call {child.parent_call_id}"
            )
