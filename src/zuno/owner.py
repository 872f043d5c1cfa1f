"""Which process owns a row: an identity that survives pid reuse, and liveness.

Rows that describe running work (a call's ``started`` row, a background job)
carry the identity of the process running it: its pid and its start time in
clock ticks since boot, so a later process that happens to get the same pid
is not mistaken for the owner. A zombie (killed, not yet reaped) is dead.
"""

from __future__ import annotations

import os

__all__ = ["identity_alive", "process_identity"]


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # The command name may hold spaces and parentheses: split after the last ")".
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_identity(pid: int | None = None) -> str:
    """``pid:start`` of a process (this one by default)."""
    pid = os.getpid() if pid is None else pid
    fields = _stat_fields(pid)
    start = fields[19].decode() if fields and len(fields) > 19 else "?"
    return f"{pid}:{start}"


def identity_alive(identity: str | None) -> bool:
    """Whether the process with this identity is still running."""
    if not identity or ":" not in identity:
        return False
    pid_text, start = identity.split(":", 1)
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    fields = _stat_fields(pid)
    if not fields or len(fields) <= 19:
        return False
    return fields[19].decode() == start and fields[0] not in (b"Z", b"X")
