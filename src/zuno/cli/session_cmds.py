"""``zuno sessions`` and ``zuno show``: the stored sessions, and one session's transcript.

Both only read the store: a store that needs an upgrade is read as it is, and
nothing is recorded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, cast

import typer

from zuno.cli.app import app
from zuno.cli.command_runtime import find_session
from zuno.cli.console import err, out, print_json
from zuno.cli.errors import user_errors
from zuno.cli.options import AllOpt, Db, Json, Workspace
from zuno.durability.store import SessionRecord, Store, open_store

__all__ = ["sessions", "show"]


@app.command()
def sessions(
    json_: Json = False,
    db: Db = None,
    workspace: Workspace = Path("."),
    all_: AllOpt = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 1000,
) -> None:
    """List the sessions of the workspace (--all: of every one), newest first."""
    from zuno.cli.render import print_sessions, session_title

    where = None if all_ else str(workspace.resolve())
    with user_errors():
        store = open_store(db, migrate=False)  # reads: never changes the schema
    try:
        with user_errors():
            records = _sessions_in(store, where, limit)
            titles = {s.session_id: session_title(s, _first_prompt(store, s)) for s in records}
        if json_:
            print_json([{**s.as_dict(), "title": titles[s.session_id]} for s in records])
        else:
            print_sessions(out, records, titles, where)
    finally:
        store.close()


def _sessions_in(store: Store, workspace: str | None, limit: int) -> list[SessionRecord]:
    """The newest sessions of ``workspace`` (None: of every workspace)."""
    if workspace is None:
        return store.list_sessions(limit)
    rows = store.query(
        "SELECT session_id FROM sessions WHERE workspace = ?"
        " ORDER BY created_at DESC, session_id DESC LIMIT ?",
        (workspace, limit),
    )
    return [s for (sid,) in rows if (s := store.get_session(str(sid))) is not None]


def _first_prompt(store: Store, session: SessionRecord) -> str | None:
    """The first user message of a session without a title (a title needs no look-up)."""
    if session.title:
        return None
    rows = store.query(
        "SELECT body FROM messages WHERE session_id = ? AND role = 'user' ORDER BY seq LIMIT 1",
        (session.session_id,),
    )
    if not rows:
        return None
    try:
        body: Any = json.loads(rows[0][0])
    except ValueError:
        return None
    return str(cast(dict[str, Any], body).get("text") or "") if isinstance(body, dict) else None


def _with_egress(
    call: dict[str, Any], ledgers: dict[tuple[str, int], list[dict[str, Any]]]
) -> dict[str, Any]:
    """A call's JSON with its egress ledger, when it ran in proxy network mode."""
    rows = ledgers.get((call["call_id"], call["attempt"]))
    return call if rows is None else {**call, "egress": rows}


@app.command()
def show(
    session: Annotated[str, typer.Argument(help="A session id (a unique prefix is enough).")],
    json_: Json = False,
    db: Db = None,
    workspace: Annotated[
        Path | None,
        typer.Option("--workspace", "-w", help="Ignored: a session keeps its own workspace."),
    ] = None,
) -> None:
    """The transcript of a session, from the store: prompts, steps, calls, notices, answer."""
    from zuno.cli.render import print_transcript
    from zuno.cli.transcript import build_transcript
    from zuno.durability.recovery import last_notice, pending_notice, settle_interrupted

    with user_errors():
        store = open_store(db, migrate=False)  # reads: never changes the schema
    try:
        with user_errors():
            record = find_session(store, session)
        # A store that needs an upgrade is read as it is, through a read-only
        # connection: nothing is settled or recorded.
        current = store.migration_needed is None
        if current:
            settle_interrupted(store, record.session_id)
        else:
            err.print(store.migration_needed, style="dim", markup=False, highlight=False)
        calls = store.calls(record.session_id)
        events = store.events(record.session_id)
        notice = pending_notice(store, record.session_id) if current else None
        transcript = build_transcript(store, record, calls=calls, events=events, pending=notice)
        if json_:
            conversation = [
                {"role": role, "text": body.get("text") or body.get("content") or ""}
                for role, body in store.messages(record.session_id)
            ]
            print_json(
                {
                    **record.as_dict(),
                    "models": list(transcript.models),
                    "prompt": transcript.prompt,
                    "instructions": list(transcript.instructions),
                    "calls": [_with_egress(c.as_dict(), transcript.egress) for c in calls],
                    "not_run": [n.as_dict() for n in transcript.not_run],
                    "events": [e.as_dict() for e in events],
                    "children": [c.session_id for c in transcript.children],
                    "messages": conversation,
                    "entries": [e.as_dict() for e in transcript.entries],
                    "steps": [s.as_dict() for s in transcript.steps if s.number is not None],
                    "late_results": [late.as_dict() for late in transcript.late],
                    "usage": transcript.usage.as_dict(),
                    "children_usage": transcript.children_usage.as_dict(),
                    "final_answer": transcript.final_answer,
                    "ending": transcript.ending,
                    "recovery": notice.as_dict() if notice else None,
                    "recovery_notices": [n.as_dict() for n in transcript.given],
                    "last_recovery_notice": (
                        last_notice(store, record.session_id) if current else None
                    ),
                }
            )
        else:
            print_transcript(out, transcript)
    finally:
        store.close()
