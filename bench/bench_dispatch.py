"""Dispatch overhead and parallelism, with durable persistence in a real SQLite file.

Run: .venv/bin/python bench/bench_dispatch.py
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import ClassVar

import anyio

from zuno.config import Config
from zuno.declarations import READ_ONLY_SAFE_PARALLEL, Declaration
from zuno.dispatch import CallRequest
from zuno.permissions import ApproveAll
from zuno.runtime import Runtime
from zuno.tool import Tool, ToolArgs, ToolContext, ToolResult


class EchoArgs(ToolArgs):
    text: str = ""
    sleep: float = 0.0


class Echo(Tool[EchoArgs]):
    name: ClassVar[str] = "echo"
    description: ClassVar[str] = "Echo."
    args_model = EchoArgs
    declaration: ClassVar[Declaration] = READ_ONLY_SAFE_PARALLEL

    async def run(self, args: EchoArgs, ctx: ToolContext) -> ToolResult:
        if args.sleep:
            await anyio.sleep(args.sleep)
        return ToolResult(args.text)


def make_runtime(root: Path) -> Runtime:
    (root / "ws").mkdir(exist_ok=True)
    return Runtime(
        root / "ws",
        config=Config(),
        db_path=root / "bench.db",
        approver=ApproveAll(),
        tools=[Echo()],
    )


async def single_calls(rt: Runtime, n: int) -> tuple[float, float]:
    """Calls per second of wall time and per second of this process's CPU time."""
    session = rt.open_session()
    request = [CallRequest("echo", {"text": "hi"})]
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        await rt.dispatch(session, request)
    return n / (time.perf_counter() - start), n / (time.process_time() - cpu)


async def batched_calls(rt: Runtime, n: int, batch: int) -> tuple[float, float]:
    session = rt.open_session()
    requests = [CallRequest("echo", {"text": str(i)}) for i in range(batch)]
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(n // batch):
        await rt.dispatch(session, requests)
    return n / (time.perf_counter() - start), n / (time.process_time() - cpu)


async def parallel(rt: Runtime, calls: int, sleep: float) -> float:
    session = rt.open_session()
    requests = [CallRequest("echo", {"sleep": sleep}) for _ in range(calls)]
    start = time.perf_counter()
    await rt.dispatch(session, requests)
    return time.perf_counter() - start


async def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    with tempfile.TemporaryDirectory() as tmp:
        rt = make_runtime(Path(tmp))
        await single_calls(rt, 200)  # warm up
        print(f"load average before the run: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        singles = [await single_calls(rt, n) for _ in range(3)]
        # Short runs, best of seven: the figure least disturbed by other load.
        best = max(w for w, _ in [await single_calls(rt, 2000) for _ in range(7)])
        batches = [await batched_calls(rt, n, 100) for _ in range(3)]
        walls = [await parallel(rt, 8, 0.1) for _ in range(5)]
        rt.close()
    print("| measure | result | target |")
    print("| --- | --- | --- |")
    wall = statistics.median(w for w, _ in singles)
    cpu = statistics.median(c for _, c in singles)
    print(
        f"| one ReadOnly call per step, durable (calls/s, median of 3 x {n}) "
        f"| {wall:,.0f} wall ({cpu:,.0f} per CPU-second) | >= 5,000 |"
    )
    print(
        f"| one ReadOnly call per step, durable (calls/s, best of 7 x 2000) | {best:,.0f} "
        "| >= 5,000 |"
    )
    wall = statistics.median(w for w, _ in batches)
    cpu = statistics.median(c for _, c in batches)
    print(
        f"| 100 ReadOnly calls per step, durable (calls/s, median of 3 x {n}) "
        f"| {wall:,.0f} wall ({cpu:,.0f} per CPU-second) | - |"
    )
    med = statistics.median(walls)
    print(
        f"| 8 ParallelSafe calls of 100 ms, one step (wall, median of 5) "
        f"| {med * 1000:.1f} ms ({med / 0.1:.3f} x 100 ms) | <= 1.1 x |"
    )


if __name__ == "__main__":
    anyio.run(main)
