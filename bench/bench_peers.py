"""Dispatch of N tool calls of one model step: Zuno against pydantic-ai, side by side.

Run:
    .venv/bin/python bench/bench_peers.py                 # 1,000 and 5,000 calls, 7 rounds
    .venv/bin/python bench/bench_peers.py --calls 1000 --rounds 11
    .venv/bin/python bench/bench_peers.py --profile zuno-1000.prof --calls 1000

Both sides run the same trivial async tool (``echo``, returns its text):

- pydantic-ai (the dev extras pin it): an ``Agent`` whose ``FunctionModel``
  answers the first request with N ``ToolCallPart`` s in one response and the
  second with text; one ``agent.run`` is timed, so what is measured is its
  validation, tool execution and result handling of the N calls (no store).
  Twice: the tool as a plain ``def`` (pydantic-ai runs it in a worker thread;
  the form issue 22's figures used) and as an ``async def``;
- Zuno: ``Runtime.dispatch`` of one step of N ``CallRequest`` s, the tool
  declared ReadOnly / Safe / ParallelSafe, every call's rows committed to a
  SQLite file (WAL) before the step returns, as ``zuno run`` does.

The three alternate, round after round, in one process (so the load of the
machine falls on all alike); each round's ratio is pydantic-ai's time over
Zuno's, and the median ratios are printed with the median times. A ratio
above 1 means Zuno is faster. ``--profile FILE`` instead writes cProfile
stats of Zuno's dispatch of ``--calls`` calls (after a warm-up).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import anyio
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from zuno.config.loading import Config
from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolResult
from zuno.core.declarations import READ_ONLY_SAFE_PARALLEL, Declaration
from zuno.dispatch.dispatcher import CallRequest
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime


class EchoArgs(ToolArgs):
    text: str = ""


class Echo(Tool[EchoArgs]):
    name: ClassVar[str] = "echo"
    description: ClassVar[str] = "Echo the text."
    args_model = EchoArgs
    declaration: ClassVar[Declaration] = READ_ONLY_SAFE_PARALLEL

    async def run(self, args: EchoArgs, ctx: ToolContext) -> ToolResult:
        return ToolResult(args.text)


# pydantic-ai ----------------------------------------------------------------------------


def pydantic_agent(n: int, *, async_tool: bool = False) -> Agent[None, str]:
    """An agent whose model asks for ``n`` echo calls in its first response, then answers.

    ``async_tool``: the tool is an ``async def`` (run on the event loop); else a
    plain ``def``, which pydantic-ai runs in a worker thread (its usual form).
    """

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("echo", {"text": f"call {i}"}, tool_call_id=f"c{i}")
                    for i in range(n)
                ]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model))
    if async_tool:

        @agent.tool_plain(name="echo")
        async def echo_async(text: str) -> str:  # pyright: ignore[reportUnusedFunction]
            """Echo the text."""
            return text

    else:

        @agent.tool_plain(name="echo")
        def echo(text: str) -> str:  # pyright: ignore[reportUnusedFunction]
            """Echo the text."""
            return text

    return agent


async def pydantic_once(agent: Agent[None, str]) -> float:
    start = time.perf_counter()
    result = await agent.run("go")
    elapsed = time.perf_counter() - start
    assert result.output == "done"
    return elapsed


# Zuno ------------------------------------------------------------------------------------


def zuno_runtime(root: Path) -> Runtime:
    workspace = root / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    return Runtime(
        workspace,
        config=Config(),
        db_path=root / "bench.db",
        approver=ApproveAll(),
        tools=[Echo()],
    )


def requests_of(n: int) -> list[CallRequest]:
    return [CallRequest("echo", {"text": f"call {i}"}, f"c{i}") for i in range(n)]


async def zuno_once(rt: Runtime, requests: Sequence[CallRequest]) -> float:
    session = rt.open_session()
    start = time.perf_counter()
    results = await rt.dispatch(session, requests)
    elapsed = time.perf_counter() - start
    assert len(results) == len(requests) and not any(r.is_error for r in results)
    return elapsed


# The run -----------------------------------------------------------------------------------


async def compare(sizes: list[int], rounds: int) -> None:
    print(f"load average before the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(
        "| calls in one step | pydantic-ai, def tool (ms) | pydantic-ai, async tool (ms) "
        "| Zuno, durable (ms) | ratio, def tool | ratio, async tool |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        rt = zuno_runtime(Path(tmp))
        try:
            for n in sizes:
                plain, coro = pydantic_agent(n), pydantic_agent(n, async_tool=True)
                requests = requests_of(n)
                for warm in (pydantic_once(plain), pydantic_once(coro), zuno_once(rt, requests)):
                    await warm
                times: dict[str, list[float]] = {"def": [], "async": [], "zuno": []}
                for i in range(rounds):
                    # Who goes first turns round, so that load falls on all alike.
                    order = ["def", "async", "zuno"][i % 3 :] + ["def", "async", "zuno"][: i % 3]
                    for side in order:
                        if side == "zuno":
                            times[side].append(await zuno_once(rt, requests))
                        else:
                            agent = plain if side == "def" else coro
                            times[side].append(await pydantic_once(agent))
                ours = times["zuno"]
                ratios = [
                    statistics.median(t / o for t, o in zip(times[k], ours, strict=True))
                    for k in ("def", "async")
                ]
                medians = [statistics.median(times[k]) * 1000 for k in ("def", "async", "zuno")]
                print(
                    f"| {n:,} | {medians[0]:,.1f} | {medians[1]:,.1f} | {medians[2]:,.1f} "
                    f"| {ratios[0]:.2f} x | {ratios[1]:.2f} x |"
                )
        finally:
            rt.close()
    print(
        "\nratio: pydantic-ai's time over Zuno's, median of the rounds (above 1: Zuno is faster);"
        "\ntarget: 1,000 calls in one step >= 2.5 x (the def tool, as issue 22 measured)"
    )


async def profile(n: int, out: Path) -> None:
    import cProfile

    with tempfile.TemporaryDirectory() as tmp:
        rt = zuno_runtime(Path(tmp))
        try:
            requests = requests_of(n)
            await zuno_once(rt, requests)
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(5):
                await zuno_once(rt, requests)
            profiler.disable()
            profiler.dump_stats(str(out))
        finally:
            rt.close()
    print(f"cProfile stats of 5 dispatches of {n} calls in {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--calls", default="1000,5000", help="calls in one step (1000,5000)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds (7)")
    parser.add_argument("--profile", type=Path, help="write cProfile stats of Zuno's side")
    args: Any = parser.parse_args()
    sizes = [int(x) for x in str(args.calls).split(",")]
    if args.profile is not None:
        anyio.run(profile, sizes[0], args.profile)
        return
    anyio.run(compare, sizes, args.rounds)


if __name__ == "__main__":
    main()
