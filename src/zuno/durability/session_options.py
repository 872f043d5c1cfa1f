"""What was chosen for a session and is kept with it (``sessions.options``, JSON).

The permission mode (:mod:`zuno.policy.modes`), the spending caps (:mod:`zuno.policy.budget`)
and a queued session's settings (:mod:`zuno.fleet.worker`) live side by side in one
JSON object; each writer changes its own keys and keeps the others.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from zuno.durability.store import Store

__all__ = ["parse_options", "session_options", "update_session_options"]


def parse_options(text: Any) -> dict[str, Any]:
    """The stored options (``{}`` when absent or not a JSON object)."""
    try:
        value: Any = json.loads(text) if text else {}
    except ValueError:
        return {}
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def session_options(store: Store, session_id: str) -> dict[str, Any]:
    """The options stored with ``session_id`` (``{}`` for none, or no such session)."""
    rows = store.query("SELECT options FROM sessions WHERE session_id = ?", (session_id,))
    return parse_options(rows[0][0]) if rows else {}


def update_session_options(store: Store, session_id: str, changes: Mapping[str, Any]) -> None:
    """Set ``changes`` in the session's options, keeping its other keys."""
    with store.transaction() as db:
        # Read and written in one transaction (the row locked on PostgreSQL): options
        # written meanwhile by another process (a fleet's) are not lost.
        row = db.execute(
            "SELECT options FROM sessions WHERE session_id = ? /*pg: FOR UPDATE*/", (session_id,)
        ).fetchone()
        if row is None:
            return
        options = {**parse_options(row[0]), **changes}
        db.execute(
            "UPDATE sessions SET options = ? WHERE session_id = ?",
            (json.dumps(options), session_id),
        )
