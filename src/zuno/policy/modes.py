"""A session's permission mode, as chosen and stored with the session.

The mode a session runs in is, first found: the one chosen for it (``--mode``,
``Runtime.open_session(mode=...)``, a switch by the user while it runs), kept
in ``sessions.options`` as ``{"mode": ...}`` so that a resumed session keeps
it; else the agent's ``permission.mode``; else ``zuno.json``'s. A session
nobody chose a mode for follows the configuration, so editing ``zuno.json``
changes it. What each mode admits is in :mod:`zuno.policy.permissions`.
"""

from __future__ import annotations

from zuno.config.permission import PermissionMode
from zuno.durability.session_options import session_options, update_session_options
from zuno.durability.store import Store
from zuno.policy.permissions import MODES

__all__ = ["check_mode", "remember_mode", "stored_mode"]


def check_mode(mode: str) -> PermissionMode:
    """``mode`` as a permission mode.

    Raises:
        ValueError: It is not one of the four modes (the message names them).
    """
    if mode not in MODES:
        raise ValueError(f"unknown permission mode {mode!r}; the modes are {', '.join(MODES)}")
    return mode


def stored_mode(store: Store, session_id: str) -> PermissionMode | None:
    """The mode chosen for the session and stored with it, or None."""
    mode = session_options(store, session_id).get("mode")
    return mode if mode in MODES else None


def remember_mode(store: Store, session_id: str, mode: PermissionMode) -> None:
    """Store ``mode`` with the session; the session's other options are kept."""
    update_session_options(store, session_id, {"mode": mode})
