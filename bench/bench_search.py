"""Benchmark of ``grep`` and ``glob`` against raw ``rg`` on the Python stdlib tree.

Run with ``python bench/bench_search.py [--root DIR] [--repeats N]``. For each
case it times the same search two ways, alternating so that load on the
machine hits both alike:

- raw: ``rg`` in a subprocess with its plain output sent to a pipe that is read
  to the end (what a person typing the command pays);
- tool: ``GrepTool.run`` / ``GlobTool.run``, from arguments to the bounded,
  model-visible text (the time inside the event loop; creating the loop is not
  counted).

It prints one row per case: the median wall time of each and their ratio
(tool / raw), the ratio of the fastest runs, and the ratio of median CPU time
(rg's plus this process's), which a busy machine disturbs less than wall time.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from zuno.output import ArtifactStore, OutputLimits
from zuno.ripgrep import find_ripgrep
from zuno.tool import Tool, ToolArgs, ToolContext
from zuno.tools.search import GlobArgs, GlobTool, GrepArgs, GrepTool

__all__ = ["main"]


@dataclass(frozen=True, slots=True)
class Case:
    """One search, as raw rg arguments and as tool arguments."""

    label: str
    raw: list[str]
    tool: Tool[Any]
    args: ToolArgs


def _cases() -> list[Case]:
    grep, glob = GrepTool(), GlobTool()
    n = ["-n", "-H"]
    return [
        Case("grep rare (122 lines)", [*n, "def __class_getitem__"], grep,
             GrepArgs(pattern="def __class_getitem__", limit=200)),
        Case("grep regex (559 lines, limit 100)", [*n, r"def \w+_cache"], grep,
             GrepArgs(pattern=r"def \w+_cache")),
        Case("grep common (129k lines, limit 100)", [*n, "import"], grep,
             GrepArgs(pattern="import")),
        Case("grep no match", [*n, "ZZZ_not_present_ZZZ"], grep,
             GrepArgs(pattern="ZZZ_not_present_ZZZ")),
        Case("grep -i *.py -C2 (limit 100)", [*n, "-i", "-g", "*.py", "-C2", "todo"], grep,
             GrepArgs(pattern="todo", ignore_case=True, include="*.py", context=2)),
        Case("grep files mode (16k files)", ["-l", "import"], grep,
             GrepArgs(pattern="import", output_mode="files")),
        Case("grep count mode", ["--count", r"class \w+Error"], grep,
             GrepArgs(pattern=r"class \w+Error", output_mode="count")),
        Case("glob *.py (13k files)", ["--files", "-g", "*.py"], glob,
             GlobArgs(pattern="*.py")),
        Case("glob **/test_*.py", ["--files", "-g", "**/test_*.py"], glob,
             GlobArgs(pattern="**/test_*.py")),
    ]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Sample:
    """One timed run: wall seconds, and CPU seconds of rg plus this process."""

    wall: float
    cpu: float


def _cpu() -> float:
    # Children's usage counts rg once it has been waited for; ours counts decoding.
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime + time.process_time()


def _time_raw(rg: str, args: list[str], root: Path) -> Sample:
    cpu, start = _cpu(), time.perf_counter()
    done = subprocess.run(
        [rg, "--no-config", *args, "."], cwd=root, stdout=subprocess.PIPE, check=False
    )
    sample = Sample(time.perf_counter() - start, _cpu() - cpu)
    assert done.returncode in (0, 1), done.returncode
    return sample


def _time_tool(case: Case, ctx: ToolContext) -> Sample:
    async def once() -> Sample:
        cpu, start = _cpu(), time.perf_counter()
        result = await case.tool.run(case.args, ctx)
        sample = Sample(time.perf_counter() - start, _cpu() - cpu)
        assert not result.is_error
        return sample

    return anyio.run(once)


def _ratio(tool: list[float], raw: list[float], pick: Callable[[list[float]], float]) -> float:
    return pick(tool) / pick(raw)


def main() -> None:
    """Run every case and print the table."""
    parser = argparse.ArgumentParser(description="grep and glob against raw rg")
    parser.add_argument("--root", type=Path, default=Path(sysconfig.get_paths()["stdlib"]))
    parser.add_argument("--repeats", type=int, default=7)
    options = parser.parse_args()
    root: Path = options.root
    rg = find_ripgrep()
    files = subprocess.run(
        [str(rg.path), "--no-config", "--files", "."], cwd=root, capture_output=True, check=True
    ).stdout.count(b"\n")
    with_artifacts = root.parent / ".zuno-bench-artifacts"
    ctx = ToolContext(
        workspace=root,
        session_id="bench",
        call_id="c",
        attempt=1,
        limits=OutputLimits(),
        artifacts=ArtifactStore(with_artifacts),
        config=None,  # type: ignore[arg-type]  # the search tools read no configuration
    )
    print(
        f"python {sys.version.split()[0]}, rg {'.'.join(map(str, rg.version))}, "
        f"{root} ({files} files searched by rg), {options.repeats} runs each, "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print("ratio: tool/raw of median wall time; min: of the fastest runs; cpu: of median CPU")
    header = f"{'case':<38} {'raw rg':>9} {'tool':>9} {'ratio':>7} {'min':>7} {'cpu':>7}"
    print(header)
    print("-" * len(header))
    ratios: list[float] = []
    for case in _cases():
        # One untimed run of each warms the page cache and the rg probe.
        _time_raw(str(rg.path), case.raw, root)
        _time_tool(case, ctx)
        raw: list[Sample] = []
        tool: list[Sample] = []
        for _ in range(options.repeats):
            raw.append(_time_raw(str(rg.path), case.raw, root))
            tool.append(_time_tool(case, ctx))
        raw_wall, tool_wall = [s.wall for s in raw], [s.wall for s in tool]
        ratio = _ratio(tool_wall, raw_wall, statistics.median)
        fastest = _ratio(tool_wall, raw_wall, min)
        cpu = _ratio([s.cpu for s in tool], [s.cpu for s in raw], statistics.median)
        ratios.append(ratio)
        print(
            f"{case.label:<38} {statistics.median(raw_wall) * 1000:>7.1f}ms "
            f"{statistics.median(tool_wall) * 1000:>7.1f}ms {ratio:>6.2f}x "
            f"{fastest:>6.2f}x {cpu:>6.2f}x"
        )
    print("-" * len(header))
    overall = statistics.geometric_mean(ratios)
    print(f"{'geometric mean of median ratios':<38} {'':>9} {'':>9} {overall:>6.2f}x")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
