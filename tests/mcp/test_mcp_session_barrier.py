"""The session barrier that ``zuno mcp serve`` relies on: concurrent steps of one session.

The barrier itself (fair order, cancellation while waiting), then three steps
dispatched at once on one session through the Python API, each an Exclusive
call of a tool that records when it runs.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import ClassVar

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from zuno.config.loading import Config
from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolResult
from zuno.core.declarations import READ_ONLY_SAFE_PARALLEL, Declaration
from zuno.dispatch.dispatcher import CallRequest
from zuno.dispatch.scheduling import SessionBarrier
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


async def test_an_exclusive_holder_waits_for_running_ones_and_holds_back_later_ones() -> None:
    barrier = SessionBarrier()
    log: list[str] = []
    release = {name: anyio.Event() for name in ("a", "e", "b")}

    async def hold(name: str, exclusive: bool) -> None:
        async with barrier.hold(exclusive):
            log.append(f"{name} in")
            await release[name].wait()
            log.append(f"{name} out")

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold, "a", False)
        await wait_all_tasks_blocked()
        tg.start_soon(hold, "e", True)
        await wait_all_tasks_blocked()
        tg.start_soon(hold, "b", False)  # would fit beside a, but e came first
        await wait_all_tasks_blocked()
        assert log == ["a in"]
        release["a"].set()
        await wait_all_tasks_blocked()
        assert log == ["a in", "a out", "e in"]
        release["e"].set()
        await wait_all_tasks_blocked()
        release["b"].set()
    assert log == ["a in", "a out", "e in", "e out", "b in", "b out"]
    assert barrier.overlapped


async def test_a_waiter_cancelled_leaves_the_queue_and_the_next_one_goes_in() -> None:
    barrier = SessionBarrier()
    log: list[str] = []
    done = anyio.Event()

    async def first() -> None:
        async with barrier.hold(True):
            await done.wait()

    async def later(name: str, exclusive: bool) -> None:
        async with barrier.hold(exclusive):
            log.append(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as inner:
                inner.start_soon(later, "cancelled", True)
                await wait_all_tasks_blocked()
                scope.cancel()
        tg.start_soon(later, "next", False)
        await wait_all_tasks_blocked()
        done.set()
    assert log == ["next"]


async def test_alone_a_step_never_marks_the_barrier_overlapped() -> None:
    barrier = SessionBarrier()
    for exclusive in (False, True, False):
        async with barrier.hold(exclusive):
            pass
    assert not barrier.overlapped


class _Args(ToolArgs):
    name: str


class _Recorder(Tool[_Args]):
    """An Exclusive tool that records when it starts and ends, yielding in between."""

    name: ClassVar[str] = "record"
    description: ClassVar[str] = "Record."
    args_model = _Args
    declaration: ClassVar[Declaration] = Declaration()

    def __init__(self) -> None:
        self.log: list[str] = []

    async def run(self, args: _Args, ctx: ToolContext) -> ToolResult:
        self.log.append(f"{args.name} start")
        for _ in range(20):  # yields, so a step running beside it would interleave
            await anyio.lowlevel.checkpoint()
        self.log.append(f"{args.name} end")
        return ToolResult("recorded")


class _Look(Tool[_Args]):
    name: ClassVar[str] = "look"
    description: ClassVar[str] = "Look."
    args_model = _Args
    declaration: ClassVar[Declaration] = READ_ONLY_SAFE_PARALLEL

    async def run(self, args: _Args, ctx: ToolContext) -> ToolResult:
        return ToolResult("looked")


async def test_concurrent_steps_of_one_session_keep_exclusive_calls_apart(
    workspace: Path, tmp_path: Path
) -> None:
    recorder = _Recorder()
    rt = Runtime(
        workspace,
        config=Config(),
        db_path=tmp_path / "z.db",
        approver=ApproveAll(),
        tools=[recorder, _Look()],
    )
    try:
        session = rt.open_session()

        async def step(name: str) -> None:
            await rt.dispatch(
                session,
                [CallRequest("look", {"name": name}), CallRequest("record", {"name": name})],
            )

        async with anyio.create_task_group() as tg:
            for name in "xyz":
                tg.start_soon(step, name)
    finally:
        rt.close()
    assert len(recorder.log) == 6
    for start, end in itertools.pairwise(recorder.log):
        if start.endswith("start"):
            assert end == start.replace("start", "end"), recorder.log
