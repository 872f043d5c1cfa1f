"""Instrumented tools for dispatcher tests: they record when they start and end."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import anyio
from pydantic import Field

from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolError, ToolResult, TransientError
from zuno.core.declarations import Concurrency, Declaration, Effect, Replay


@dataclass
class Recorder:
    """Start and end events in one global order (a counter, not the clock)."""

    events: list[tuple[str, str, int]] = field(default_factory=lambda: [])
    _tick: itertools.count[int] = field(default_factory=itertools.count)
    effects: list[str] = field(default_factory=lambda: [])

    def mark(self, what: str, tag: str) -> None:
        self.events.append((what, tag, next(self._tick)))

    def intervals(self) -> dict[str, tuple[int, int]]:
        starts = {tag: t for what, tag, t in self.events if what == "start"}
        ends = {tag: t for what, tag, t in self.events if what == "end"}
        return {tag: (starts[tag], ends[tag]) for tag in starts if tag in ends}


class ProbeArgs(ToolArgs):
    tag: str = Field(min_length=1, max_length=40)
    mode: Literal["exclusive", "parallel", "background"] = "parallel"
    effect: Literal["read_only", "side_effecting"] = "read_only"
    delay: float = Field(0.0, ge=0, le=5)
    fail: Literal["none", "error", "transient", "crash"] = "none"


_MODES = {
    "exclusive": Concurrency.EXCLUSIVE,
    "parallel": Concurrency.PARALLEL_SAFE,
    "background": Concurrency.ISOLATED_BACKGROUND,
}


class ProbeTool(Tool[ProbeArgs]):
    """A tool whose declaration comes from its arguments."""

    name: ClassVar[str] = "probe"
    description: ClassVar[str] = "Test tool."
    args_model = ProbeArgs
    mixed: ClassVar[bool] = True
    rule_argument: ClassVar[str | None] = "tag"

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def declare(self, args: ProbeArgs) -> Declaration:
        effect = Effect.READ_ONLY if args.effect == "read_only" else Effect.SIDE_EFFECTING
        replay = Replay.SAFE if effect is Effect.READ_ONLY else Replay.NEVER
        return Declaration(effect, replay, _MODES[args.mode])

    async def run(self, args: ProbeArgs, ctx: ToolContext) -> ToolResult:
        self.recorder.mark("start", args.tag)
        try:
            # A checkpoint even at zero delay, so overlapping calls interleave.
            await anyio.sleep(args.delay)
            if args.effect == "side_effecting":
                self.recorder.effects.append(args.tag)
            if args.fail == "error":
                raise ToolError(f"{args.tag} failed on purpose")
            if args.fail == "transient":
                raise TransientError(f"{args.tag} is busy")
            if args.fail == "crash":
                raise RuntimeError("boom")
            return ToolResult(f"done {args.tag}", data={"tag": args.tag})
        finally:
            self.recorder.mark("end", args.tag)


class FlakyArgs(ToolArgs):
    key: str


class FlakyTool(Tool[FlakyArgs]):
    """Read-only and Safe: fails transiently a set number of times, then succeeds."""

    name: ClassVar[str] = "flaky"
    description: ClassVar[str] = "Test tool."
    args_model = FlakyArgs
    declaration: ClassVar[Declaration] = Declaration(
        Effect.READ_ONLY, Replay.SAFE, Concurrency.PARALLEL_SAFE
    )

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def run(self, args: FlakyArgs, ctx: ToolContext) -> ToolResult:
        self.calls += 1
        if self.calls <= self.failures:
            raise TransientError(f"transient failure {self.calls}")
        return ToolResult(f"ok after {self.calls}")


class BareArgs(ToolArgs):
    value: int = 0


class BareTool(Tool[BareArgs]):
    """Declares nothing: it must get SideEffecting / Never / Exclusive."""

    name: ClassVar[str] = "bare"
    description: ClassVar[str] = "Test tool."
    args_model = BareArgs

    def __init__(self) -> None:
        self.runs = 0

    async def run(self, args: BareArgs, ctx: ToolContext) -> ToolResult:
        self.runs += 1
        return ToolResult(f"bare {args.value}")


def probe_tools(recorder: Recorder, failures: int = 0) -> list[Tool[Any]]:
    return [ProbeTool(recorder), FlakyTool(failures), BareTool()]
