"""A session's permission mode, as chosen and stored with the session.

The mode a session runs in is, first found: the one chosen for it (``--mode``,
``Runtime.open_session(mode=...)``, a switch by the user while it runs), kept
in ``sessions.options`` as ``{"mode": ...}`` so that a resumed session keeps
it; else the agent's ``permission.mode``; else ``zuno.json``'s. A session
nobody chose a mode for follows the configuration, so editing ``zuno.json``
changes it. What each mode admits is in :mod:`zuno.permissions`.
"""

from __future__ import annotations

import json
from typing import Any, cast

from zuno.config import PermissionMode
from zuno.permissions import MODES
from zuno.store import Store

__all__ = ["check_mode", "remember_mode", "stored_mode"]


def check_mode(mode: str) -> PermissionMode:
    """``mode`` as a permission mode.

    Raises:
        ValueError: It is not one of the four modes (the message names them).
    """
    if mode not in MODES:
        raise ValueError(f"unknown permission mode {mode!r}; the modes are {', '.join(MODES)}")
    return cast(PermissionMode, mode)


def _options(text: Any) -> dict[str, Any]:
    try:
        value: Any = json.loads(text) if text else {}
    except ValueError:
        return {}
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}


def stored_mode(store: Store, session_id: str) -> PermissionMode | None:
    """The mode chosen for the session and stored with it, or None."""
    rows = store.query("SELECT options FROM sessions WHERE session_id = ?", (session_id,))
    if not rows:
        return None
    mode = _options(rows[0][0]).get("mode")
    return cast(PermissionMode, mode) if mode in MODES else None


def remember_mode(store: Store, session_id: str, mode: PermissionMode) -> None:
    """Store ``mode`` with the session; the session's other options are kept."""
    with store.transaction() as db:
        # Read and written in one transaction (the row locked on PostgreSQL): a
        # fleet's options written meanwhile are not lost.
        row = db.execute(
            "SELECT options FROM sessions WHERE session_id = ? /*pg: FOR UPDATE*/", (session_id,)
        ).fetchone()
        if row is None:
            return
        options = {**_options(row[0]), "mode": mode}
        db.execute(
            "UPDATE sessions SET options = ? WHERE session_id = ?",
            (json.dumps(options), session_id),
        )
