"""How transcripts, surfaces and results look in a terminal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from zuno.cli.not_run import NotRun
from zuno.cli.plain import (
    SURFACE_HEADERS,
    surface_json,
    surface_notes,
    surface_rows,
    surface_table_rows,
)
from zuno.dispatch.registry import Surface
from zuno.durability.store.records import CallRecord, SessionRecord, iso
from zuno.execution.sandbox.egress.ledger import egress_line

if TYPE_CHECKING:
    from zuno.cli.transcript import LateResult, Said, Step, Transcript
    from zuno.dispatch.dispatcher import CallResult
    from zuno.integrations.mcp.errors import McpServerError

__all__ = [
    "outcome_style",
    "print_result",
    "print_sessions",
    "print_surface",
    "print_table",
    "print_transcript",
    "session_title",
    "styled_diff",
    "surface_json",
    "surface_rows",
]

_STYLES = {"ok": "green", "error": "red", "blocked": "yellow", "uncertain": "magenta"}


def outcome_style(outcome: str | None) -> str:
    return _STYLES.get(outcome or "", "white")


def styled_diff(lines: Sequence[str], indent: str = "") -> Text:
    """Unified-diff lines coloured as a terminal shows them: additions green, removals red."""
    from zuno.contract.call_text import diff_style

    text = Text()
    for number, line in enumerate(lines):
        text.append(("\n" if number else "") + indent)
        text.append(line, style=diff_style(line))
    return text


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


def print_surface(
    console: Console,
    surface: Surface,
    agent: str,
    mcp_failures: Mapping[str, McpServerError] | None = None,
) -> None:
    """The ``zuno tools`` table (plain lines off a terminal, see :mod:`zuno.cli.plain`)."""
    rows = surface_table_rows(surface)
    print_table(
        console,
        f"Active tools for agent {agent!r}",
        SURFACE_HEADERS,
        rows,
        note=surface_notes(surface, rows, mcp_failures),
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
    # The output as the tool wrote it: no emoji for ':x:' (a slice), no markup.
    console.print(result.output, markup=False, highlight=False, emoji=False)


def session_title(session: SessionRecord, first_prompt: str | None = None) -> str:
    """The session's title, else the first line of its first prompt (one line either way)."""
    text = session.title or first_prompt or ""
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    return line if len(line) <= 80 else line[:79] + "…"


def print_sessions(
    console: Console,
    sessions: Sequence[SessionRecord],
    titles: dict[str, str],
    workspace: str | None,
) -> None:
    """The sessions of one workspace (``workspace``), or of every one (None), newest first."""
    if not sessions:
        where = f"in {workspace}" if workspace else "in this store"
        hint = "; `zuno sessions --all` lists every workspace's" if workspace else ""
        console.print(f"No sessions {where}{hint}.", markup=False, highlight=False)
        return
    children = any(s.parent_call_id for s in sessions)
    # Worker and state come with session leases; rows made before them have neither.
    leased = any(s.state or s.owner for s in sessions)
    headers = ["session", "created", "agent", "model", "calls"]
    headers += ["worker", "state"] if leased else []
    headers += ["parent call"] if children else []
    headers += [] if workspace else ["workspace"]
    rows: list[list[str]] = []
    for s in sessions:
        row = [
            s.session_id,
            (iso(s.created_at) or "")[:19].replace("T", " "),
            s.agent,
            s.model or "-",
            str(s.calls),
        ]
        if leased:
            row += [_short_worker(s.owner or "") or "-", s.state or "-"]
        row += [s.parent_call_id or "-"] if children else []
        row += [] if workspace else [s.workspace]
        rows.append([*row, titles.get(s.session_id, "")])
    where = f"in {workspace}" if workspace else "of every workspace"
    title = f"Sessions {where} (newest first; times in UTC)"
    print_table(console, title, [*headers, "title"], rows)


def _short_worker(worker: str) -> str:
    """A worker id as people read it elsewhere (``pid@machine``), to fit a column."""
    from zuno.durability.workers import WorkerIdentity

    who = WorkerIdentity.parse(worker)
    return who.short if who is not None else worker


def print_transcript(console: Console, transcript: Transcript) -> None:
    """A session as a person reads it: who, what was asked, each step, how it ended."""
    from zuno.cli.transcript import Said

    session = transcript.session
    models = ", ".join(transcript.models) or "-"
    console.print(
        Text.assemble(
            ("Session ", "bold"),
            (session.session_id, "bold cyan"),
            f"  agent {session.agent}  model {models}  created {iso(session.created_at)}",
        ),
        highlight=False,
    )
    console.print(Text(f"  workspace {session.workspace}", style="dim"), highlight=False)
    if session.title:
        console.print(Text(f"  title {session.title}", style="dim"), highlight=False)
    if session.parent_call_id:
        console.print(f"  delegated by call {session.parent_call_id}", style="dim")
    for path in transcript.instructions:
        console.print(Text(f"  instructions {path}", style="dim"), highlight=False)
    shown_notices: set[int] = set()
    prompted = False
    model_steps = [s for s in transcript.steps if s.number is not None]
    conversation = bool(model_steps) or transcript.prompt is not None
    final = model_steps[-1] if model_steps and transcript.final_answer is not None else None
    for entry in transcript.entries:
        if isinstance(entry, Said):
            if entry.recovery_attempt is not None:
                shown_notices.add(entry.recovery_attempt)
                heading = f"attempt {entry.recovery_attempt}, given to the model"
                _print_notice(console, heading, entry.text)
                continue
            prompted = _print_said(console, entry, prompted)
            continue
        _print_step(
            console,
            entry,
            final=entry is final,
            alone=not conversation,
            late=transcript.late,
            egress=transcript.egress,
        )
    for notice in transcript.given:
        if notice.attempt not in shown_notices:
            heading = f"attempt {notice.attempt}, given to the model {iso(notice.created_at)}"
            _print_notice(console, heading, notice.text)
    if transcript.children:
        console.print(Text("\nchild sessions:", style="bold"))
        for child in transcript.children:
            console.print(
                f"  {child.session_id} (agent {child.agent}) from call {child.parent_call_id}",
                highlight=False,
            )
    if transcript.pending is not None:
        _print_notice(console, "for the next turn, not given yet", transcript.pending.text)
    if transcript.final_answer is None and transcript.ending:
        console.print(Text("\n" + transcript.ending, style="yellow"), highlight=False)
    if transcript.usage.requests:
        console.print(Text(f"\nusage: {transcript.usage.describe()}"), highlight=False)
    if transcript.children_usage.requests:
        console.print(
            Text(f"usage of child sessions: {transcript.children_usage.describe()}"),
            highlight=False,
        )


def _print_said(console: Console, said: Said, prompted: bool) -> bool:
    """A prompt, a later instruction or a compaction summary; whether a prompt was shown."""
    if said.compaction is not None:
        console.print(
            Text(f"\ncompacted ({said.compaction}): from here the model is given", style="bold")
        )
        console.print(Text(said.text, style="cyan"), highlight=False)
        return prompted
    console.print(Text("\nuser:" if prompted else "\nprompt:", style="bold"))
    console.print(Text(said.text), highlight=False)
    return True


def _print_notice(console: Console, heading: str, text: str) -> None:
    console.print(Text(f"\nrecovery notice ({heading}):", style="bold magenta"))
    console.print(Text(text, style="magenta"), highlight=False)


def _print_step(
    console: Console,
    step: Step,
    *,
    final: bool,
    alone: bool,
    late: Sequence[LateResult] = (),
    egress: Mapping[tuple[str, int], Sequence[Mapping[str, Any]]] | None = None,
) -> None:
    """A model step (its text, then its calls), or a step of direct calls.

    ``alone``: the session has no conversation, so its direct steps are just steps.
    ``late``: the session's late results; each is printed under its call.
    ``egress``: the egress ledgers, by (call id, attempt); each printed under its call.
    """
    if step.is_answer:
        console.print(Text("\nfinal answer:" if final else "\nanswer:", style="bold green"))
        console.print(Text(step.text), highlight=False)
        return
    if step.number is not None:
        title = f"\nstep {step.number}"
    elif alone:
        title = f"\nstep {step.dispatch_step}"
    else:
        title = f"\ndirect calls (dispatch step {step.dispatch_step})"
    console.print(Text(title, style="bold"))
    if step.text:
        console.print(Text(step.text), highlight=False)
    if step.undispatched:
        for index, (tool, arguments) in enumerate(step.asked):
            console.print(
                Text.assemble(
                    f"  #{index} ",
                    (tool, "bold"),
                    ("  not run: the run stopped before its calls were dispatched", "yellow"),
                ),
                highlight=False,
            )
            console.print(Text(f"     args: {_cut(arguments)}", style="dim"), highlight=False)
        return
    entries: list[CallRecord | NotRun] = sorted(
        [*step.calls, *step.not_run],
        key=lambda e: (e.index, e.attempt if isinstance(e, CallRecord) else 0),
    )
    for c in entries:
        if isinstance(c, NotRun):
            console.print(
                Text.assemble(f"  #{c.index} ", (c.tool, "bold"), ("  " + c.status, "yellow")),
                highlight=False,
            )
            console.print(Text(f"     args: {c.arguments}", style="dim"), highlight=False)
            continue
        _print_call(console, c)
        for row in (egress or {}).get((c.call_id, c.attempt), ()):
            console.print(Text(f"     network: {egress_line(row)}", style="dim"), highlight=False)
        for result in late:
            if result.belongs_to(c):
                _print_late(console, result)


def _print_late(console: Console, late: LateResult) -> None:
    """What a call's owner reported after the row was settled otherwise; the row stands."""
    data = late.data
    when = iso(late.at) or "?"
    if late.kind == "job.late_result":
        code = data.get("exit_code")
        exit_text = f", exit {code}" if code is not None else ""
        detail = f" ({data['detail']})" if data.get("detail") else ""
        line = (
            f"     job {data.get('job_id', '?')} ended after it was marked lost: "
            f"{data.get('state', '?')}{exit_text}{detail}  {when}"
        )
        console.print(Text(line, style="magenta"), highlight=False)
        return
    runner = _short_worker(str(data.get("runner") or "")) or "?"
    console.print(
        Text(
            f"     late result after it was settled {data.get('settled_as', '?')}: "
            f"{data.get('outcome', '?')} (worker {runner}, {when}; the settled outcome stands)",
            style="magenta",
        ),
        highlight=False,
    )
    text = str(data.get("result") or "").strip().splitlines()
    for line in text[:3]:
        shown = line if len(line) <= 200 else line[:199] + "…"
        console.print(Text(f"       {shown}", style="magenta"), highlight=False)
    if len(text) > 3:
        console.print(Text(f"       ... {len(text) - 3} more lines", style="dim"))


def _cut(text: str, width: int = 200) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _print_call(console: Console, c: CallRecord) -> None:
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
            (f"  {c.mode} mode" if c.mode else "", "dim"),  # the permission mode it ran in
        ),
        highlight=False,
    )
    console.print(Text(f"     args: {_cut(c.arguments)}", style="dim"), highlight=False)
    if c.result:
        first = c.result.strip().splitlines()[:6]
        more = len(c.result.strip().splitlines()) - len(first)
        for line in first:
            shown = line if len(line) <= 200 else line[:199] + "…"
            console.print(Text(f"     {shown}"), highlight=False)
        if more > 0:
            console.print(Text(f"     ... {more} more lines", style="dim"))
