"""Benchmark: a command printing 1 GiB through the shell tool, against /dev/null.

Rows, run round-robin so that the machine's noise falls on all of them alike:

- ``baseline``: ``sh -c 'CMD > /dev/null'``, no reader at all (the issue's yardstick);
- ``cat reader``: ``sh -c 'CMD | cat > /dev/null'``, the cost of any reading process;
- ``> file``: ``sh -c 'CMD > FILE'`` on disk, what writing the output to a file costs
  the command alone (the floor of any design that keeps the whole output);
- ``zuno shell, disk artifacts``: the shell tool in a child Python process;
- ``zuno shell, tmpfs artifacts``: the same with the artifact folder on /dev/shm;
- ``zuno shell, capped artifacts``: on disk with ``artifact_max_bytes`` (--cap).

Columns: the minimum and the median wall time, the median's ratio to the
baseline's, median CPU seconds (less sensitive than wall time to other load on
the machine), and Zuno's peak RSS (``ru_maxrss`` of the child interpreter
alone). CPU is that of every process for the plain rows, and Zuno's own for
Zuno's: the sandboxed command's is lost to rusage in bubblewrap's PID namespace.
Zuno's wall and CPU are those of the tool call, without the interpreter's start.

Run: ``.venv/bin/python bench/bench_shell.py [--size BYTES] [--repeat N] [--lines]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["main"]

_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from types import SimpleNamespace
import anyio
from zuno.output import ArtifactStore, OutputLimits
from zuno.tool import ToolContext
from zuno.tools.shell import ShellArgs, ShellTool

workspace, artifacts, command = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
cap = int(sys.argv[4]) or None
config = SimpleNamespace(tool_output=SimpleNamespace(artifact_max_bytes=cap))

def cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime

async def main() -> None:
    ctx = ToolContext(workspace=workspace, session_id="bench", call_id="c", attempt=1,
                      limits=OutputLimits(), artifacts=ArtifactStore(artifacts), config=config)
    cpu_before, started = cpu(), time.perf_counter()
    result = await ShellTool().run(ShellArgs(command=command, timeout=600), ctx)
    wall, used = time.perf_counter() - started, cpu() - cpu_before
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    artifact = result.data["stdout_artifact"]
    print(json.dumps({"wall": wall, "cpu": used, "rss_mib": rss, "data": result.data,
                      "artifact_bytes": Path(artifact).stat().st_size if artifact else 0,
                      "output_bytes": len(result.output.encode())}))

anyio.run(main)
"""


@dataclass
class _Row:
    label: str
    run: Callable[[], tuple[float, float, float | None]]
    """Runs once; returns wall and CPU seconds, and Zuno's peak RSS in MiB (None for a plain
    command)."""
    walls: list[float] = field(default_factory=lambda: [])
    cpus: list[float] = field(default_factory=lambda: [])
    peak: float | None = None


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _shell(script: str) -> Callable[[], tuple[float, float, float | None]]:
    def run() -> tuple[float, float, float | None]:
        cpu, started = _children_cpu(), time.perf_counter()
        subprocess.run(["sh", "-c", script], check=True)
        return time.perf_counter() - started, _children_cpu() - cpu, None

    return run


_last: dict[str, Any] = {}


def _zuno(
    command: str, artifacts_parent: Path, cap: int
) -> Callable[[], tuple[float, float, float | None]]:
    def run() -> tuple[float, float, float | None]:
        with tempfile.TemporaryDirectory(dir=artifacts_parent, prefix="zuno-bench-") as tmp:
            workspace = Path(tmp) / "ws"
            workspace.mkdir()
            argv = [sys.executable, "-c", _CHILD, str(workspace), str(Path(tmp) / "art")]
            done = subprocess.run(
                [*argv, command, str(cap)], check=True, capture_output=True, text=True
            )
        found: dict[str, Any] = json.loads(done.stdout)
        _last.clear()
        _last.update(found)
        return float(found["wall"]), float(found["cpu"]), float(found["rss_mib"])

    return run


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description="Benchmark the shell tool on a huge output.")
    parser.add_argument("--size", type=int, default=1 << 30, help="bytes printed")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--cap", type=int, default=16 << 20, help="artifact_max_bytes of the capped row"
    )
    parser.add_argument(
        "--lines", action="store_true", help="print 80-byte lines instead of one endless line"
    )
    options = parser.parse_args()
    if options.lines:
        command = f"yes \"$(printf '%079d' 0)\" | head -c {options.size}"
    else:
        command = f"head -c {options.size} /dev/zero | tr '\\0' 'a'"
    disk = Path(tempfile.gettempdir())
    spill = disk / f"zuno-bench-{os.getpid()}.out"
    rows = [
        _Row("baseline (> /dev/null)", _shell(f"{command} > /dev/null")),
        _Row("cat reader (| cat > /dev/null)", _shell(f"{command} | cat > /dev/null")),
        _Row("> file on disk, no reader", _shell(f"{command} > {spill}; rm -f {spill}")),
        _Row("zuno shell, disk artifacts", _zuno(command, disk, 0)),
    ]
    if Path("/dev/shm").is_dir():
        rows.append(_Row("zuno shell, tmpfs artifacts", _zuno(command, Path("/dev/shm"), 0)))
    capped = f"zuno shell, artifacts capped {options.cap >> 20} MiB"
    rows.append(_Row(capped, _zuno(command, disk, options.cap)))
    for _ in range(options.repeat):
        for row in rows:
            wall, cpu, rss = row.run()
            row.walls.append(wall)
            row.cpus.append(cpu)
            if rss is not None:
                row.peak = max(row.peak or 0.0, rss)
    base = statistics.median(rows[0].walls)
    print(f"command: {command}   ({options.repeat} runs each; {os.cpu_count()} CPUs)")
    print(f"{'run':36} {'min s':>6} {'median':>7} {'ratio':>6} {'CPU s':>6} {'peak RSS MiB':>13}")
    for row in rows:
        wall = statistics.median(row.walls)
        rss_text = f"{row.peak:13.1f}" if row.peak is not None else f"{'-':>13}"
        print(
            f"{row.label:36} {min(row.walls):6.2f} {wall:7.2f} {wall / base:6.2f} "
            f"{statistics.median(row.cpus):6.2f} {rss_text}"
        )
    data: dict[str, Any] = _last.get("data") or {}
    print(
        f"last zuno result: sandbox={data.get('sandbox')} stdout_bytes={data.get('stdout_bytes')} "
        f"artifact_bytes={_last.get('artifact_bytes')} output_bytes={_last.get('output_bytes')}"
    )


if __name__ == "__main__":
    main()
