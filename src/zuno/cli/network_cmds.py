"""``zuno network suggest [SESSION]``: rules for the hosts proxy mode refused.

It reads the egress ledgers (the ``egress`` rows of ``call.finished`` and ``job.egress`` events,
see :mod:`zuno.execution.sandbox.egress.ledger`) of one session, or of the most recent
sessions, and prints each refused ``host:port`` with how often it was
refused, as entries ready to paste into ``sandbox.network_allow``.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from zuno.cli.app import app
from zuno.cli.command_runtime import find_session
from zuno.cli.console import out
from zuno.cli.errors import user_errors
from zuno.cli.options import Db, Json
from zuno.durability.store import open_store
from zuno.execution.sandbox.egress.ledger import LEDGER_EVENTS, suggested_rules

__all__ = ["network_app"]

network_app = typer.Typer(
    help='The egress proxy of sandbox.network "proxy": rules from what it refused.',
    no_args_is_help=True,
)
app.add_typer(network_app, name="network")

_RECENT = 200
"""Sessions read when none is named (the most recent first)."""


@network_app.command("suggest")
def suggest(
    session: Annotated[
        str | None,
        typer.Argument(help="A session id or unique prefix (default: the recent sessions)."),
    ] = None,
    json_: Json = False,
    db: Db = None,
) -> None:
    """List the hosts refused by the egress proxy, with counts, as network_allow entries."""
    with user_errors():
        store = open_store(db, migrate=False)  # reads: never changes the schema
    try:
        with user_errors():
            if session is not None:
                ids = [find_session(store, session).session_id]
            else:
                ids = [s.session_id for s in store.list_sessions(limit=_RECENT)]
            rows: list[dict[str, Any]] = [
                row
                for sid in ids
                for event in store.events(sid)
                if event.kind in LEDGER_EVENTS and isinstance(event.data.get("egress"), list)
                for row in event.data["egress"]
            ]
    finally:
        store.close()
    rules = suggested_rules(rows)
    if json_:
        sys.stdout.write(
            json.dumps({"rules": [{"entry": e, "refused": n} for e, n in rules]}, indent=2) + "\n"
        )
        return
    if not rules:
        out.print("no connection was refused", markup=False, highlight=False)
        return
    out.print(
        "# refused hosts; add the ones you trust to sandbox.network_allow:",
        markup=False,
        highlight=False,
    )
    for entry, count in rules:
        out.print(f'"{entry}",  # refused {count}x', markup=False, highlight=False)
