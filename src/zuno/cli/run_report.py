"""What the end of a run reports beyond its status: time spent, files changed, the answer kept.

``zuno run`` and ``zuno resume`` (with ``--json``, ``--output-format json``
or ``--output-last-message``) tell a program how long the run took and where
the time went, which workspace files its calls changed, and write the final
answer to a file. The numbers come from the runtime's events as they happen
(:class:`RunClock`) and the changed files from the checkpoints the dispatcher
took before each side-effecting call (:func:`changed_files`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["RunClock", "changed_files", "write_last_message"]


class RunClock:
    """Wall time of a run: in total, waiting for the model, and running tool calls.

    Only the run's own agent is timed: a child agent's model requests and calls
    happen inside its parent's ``task`` call, so they count as tool time.
    """

    def __init__(self) -> None:
        self._begun = time.monotonic()
        self._open: dict[str, float] = {}
        self.model_s = 0.0
        self.tools_s = 0.0

    def start(self, what: str) -> None:
        """``model`` or ``tools`` begins now."""
        self._open[what] = time.monotonic()

    def stop(self, what: str) -> None:
        """``model`` or ``tools`` ends now (nothing when it had not begun)."""
        begun = self._open.pop(what, None)
        if begun is None:
            return
        spent = time.monotonic() - begun
        if what == "model":
            self.model_s += spent
        else:
            self.tools_s += spent

    def as_dict(self) -> dict[str, int]:
        """``{"total_ms", "model_ms", "tools_ms"}``, whole milliseconds."""
        for what in list(self._open):
            self.stop(what)
        return {
            "total_ms": round((time.monotonic() - self._begun) * 1000),
            "model_ms": round(self.model_s * 1000),
            "tools_ms": round(self.tools_s * 1000),
        }


def changed_files(store: Any, workspace: Path, call_ids: Iterable[str]) -> list[str] | None:
    """The workspace paths the given calls changed, sorted (None: the checkpoints cannot tell).

    A call changed what differs between the checkpoint taken just before it
    and the next checkpoint of the workspace (or the state now, for the last).
    Calls without a checkpoint (read-only ones, or checkpoints switched off)
    add nothing.
    """
    from zuno.workspace.checkpoints.store import CheckpointError, checkpoints_of_store

    ids = list(dict.fromkeys(call_ids))
    if not ids:
        return []
    marks = ", ".join("?" for _ in ids)
    rows = store.query(
        f"SELECT DISTINCT snapshot FROM calls WHERE call_id IN ({marks}) AND snapshot IS NOT NULL",
        tuple(ids),
    )
    snapshots = [str(row[0]) for row in rows]
    if not snapshots:
        return []
    try:
        checkpoints = checkpoints_of_store(store, workspace)
        now: str | None = None
        paths: set[str] = set()
        for before in snapshots:
            after = checkpoints.next_after(before)
            if after is None:
                now = now or checkpoints.current_tree()
                after = now
            paths.update(change.path for change in checkpoints.changes(before, after))
    except (CheckpointError, OSError):
        return None
    return sorted(paths)


def write_last_message(path: Path, text: str) -> str | None:
    """Write the run's last model message to ``path``; the problem in words, or None."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        return f"--output-last-message {path}: cannot be written: {exc.strerror or exc}"
    return None
