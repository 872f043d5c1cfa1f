"""The calls a step asked for that never started: no row, only the step's own record.

A step's ``dispatch.started`` event names the calls the model asked for; a call
with no row of its own never started, either because its step is still running
or because the run stopped first. Both the transcript (:mod:`zuno.cli.transcript`)
and the terminal view of it (:mod:`zuno.cli.render`) show them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zuno.durability.store.records import CallRecord, EventRecord
from zuno.durability.workers import runner_running

__all__ = ["NotRun", "calls_not_run"]


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
