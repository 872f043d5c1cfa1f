"""Benchmark of the ``read`` tool on large files: time and peak memory.

Run with ``python bench/bench_read.py``. It builds its files in a temporary
folder (a 100 MiB text file of 7 million lines written in chunks, and a 1 GiB sparse file made with
``truncate``), reads each case several times through ``ReadTool.run`` and prints
one table row per case: the median wall time, the Python heap peak of one read
(tracemalloc) and how much the process's maximum resident set grew (ru_maxrss).
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

import anyio

from zuno.contract.output import ArtifactStore, OutputLimits, format_size
from zuno.contract.tool import ToolContext
from zuno.tools.read import ReadArgs, ReadTool

__all__ = ["main"]

_TEXT_LINES = 7_000_000
_REPEATS = 5


@dataclass(frozen=True, slots=True)
class Case:
    """One measured read."""

    label: str
    args: ReadArgs
    file_size: int


def _build_text(path: Path) -> None:
    # Written in blocks so the benchmark itself does not inflate maxrss.
    # Short lines, so that 2000 of them fit the default 50 KiB output limit.
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, _TEXT_LINES, 10_000):
            f.write("".join(f"{i:07d} xxxxxx\n" for i in range(start, start + 10_000)))


def _build_sparse(path: Path) -> None:
    path.write_text("".join(f"line {i}\n" for i in range(5000)), encoding="utf-8")
    subprocess.run(["truncate", "-s", str(1 << 30), str(path)], check=True)


def _maxrss_bytes() -> int:
    # Linux reports kilobytes.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _measure(case: Case, ctx: ToolContext) -> tuple[float, int, int, int]:
    tool = ReadTool()
    before = _maxrss_bytes()
    times: list[float] = []
    shown = 0
    for _ in range(_REPEATS):
        start = time.perf_counter()
        result = anyio.run(tool.run, case.args, ctx)
        times.append(time.perf_counter() - start)
        assert result.data is not None
        shown = int(result.data["lines_shown"])
    grown = _maxrss_bytes() - before
    tracemalloc.start()
    anyio.run(tool.run, case.args, ctx)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return statistics.median(times), peak, grown, shown


def main() -> None:
    """Build the files, run every case and print the table."""
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder)
        text = workspace / "big.txt"
        sparse = workspace / "sparse.txt"
        _build_text(text)
        _build_sparse(sparse)
        small = workspace / "small.txt"
        small.write_text("".join(f"line {i}\n" for i in range(2000)), encoding="utf-8")
        ctx = ToolContext(
            workspace=workspace,
            session_id="bench",
            call_id="c",
            attempt=1,
            limits=OutputLimits(),
            artifacts=ArtifactStore(workspace / "artifacts"),
            config=None,  # type: ignore[arg-type]
        )
        cases = [
            Case("small file, 2000 lines", ReadArgs(path="small.txt"), small.stat().st_size),
            Case("text file, first 2000 lines", ReadArgs(path="big.txt"), text.stat().st_size),
            Case(
                "text file, offset 6900000",
                ReadArgs(path="big.txt", offset=6_900_000, limit=100),
                text.stat().st_size,
            ),
            Case(
                "sparse file, first 2000 lines",
                ReadArgs(path="sparse.txt"),
                sparse.stat().st_size,
            ),
        ]
        print(f"python {sys.version.split()[0]}, median of {_REPEATS} reads")
        header = (
            f"{'case':<32} {'file':>10} {'shown':>6} {'time':>10} {'py peak':>10} {'rss +':>10}"
        )
        print(header)
        print("-" * len(header))
        for case in cases:
            seconds, peak, grown, shown = _measure(case, ctx)
            print(
                f"{case.label:<32} {format_size(case.file_size):>10} {shown:>6} "
                f"{seconds * 1000:>8.2f}ms {format_size(peak):>10} {format_size(grown):>10}"
            )


if __name__ == "__main__":
    main()
