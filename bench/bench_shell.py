"""Benchmark: a command printing 1 GiB through the shell tool, against /dev/null.

Rows (median of --repeat runs):

- ``baseline``: ``sh -c 'CMD > /dev/null'``, no reader at all (the issue's yardstick);
- ``cat reader``: ``sh -c 'CMD | cat > /dev/null'``, the cost of any reading process;
- ``zuno shell``: the shell tool in a child Python process, artifacts on disk;
- ``zuno shell, tmpfs artifacts``: the same with the artifact folder on /dev/shm.

Zuno's rows run in a child interpreter so that its peak RSS (``ru_maxrss`` of
that process alone) is Zuno's own, not the benchmark's.

Run: ``.venv/bin/python bench/bench_shell.py [--size BYTES] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["main"]

_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
import anyio
from zuno.output import ArtifactStore, OutputLimits
from zuno.tool import ToolContext
from zuno.tools.shell import ShellArgs, ShellTool

workspace, artifacts, command = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]

async def main() -> None:
    ctx = ToolContext(workspace=workspace, session_id="bench", call_id="c", attempt=1,
                      limits=OutputLimits(), artifacts=ArtifactStore(artifacts), config=None)
    started = time.perf_counter()
    result = await ShellTool().run(ShellArgs(command=command, timeout=600), ctx)
    wall = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall": wall, "rss_mib": rss, "data": result.data,
                      "output_bytes": len(result.output.encode())}))

anyio.run(main)
"""


def _time_shell(script: str) -> float:
    started = time.perf_counter()
    subprocess.run(["sh", "-c", script], check=True)
    return time.perf_counter() - started


def _zuno(command: str, artifacts_parent: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=artifacts_parent, prefix="zuno-bench-") as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(workspace), str(Path(tmp) / "art"), command],
            check=True,
            capture_output=True,
            text=True,
        )
        found: dict[str, Any] = json.loads(done.stdout)
        return found


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description="Benchmark the shell tool on a huge output.")
    parser.add_argument("--size", type=int, default=1 << 30, help="bytes printed")
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    command = f"head -c {options.size} /dev/zero | tr '\\0' 'a'"
    rows: list[tuple[str, list[float], float | None]] = []
    rows.append(("baseline (> /dev/null)", [], None))
    rows.append(("cat reader (| cat > /dev/null)", [], None))
    for _ in range(options.repeat):
        rows[0][1].append(_time_shell(f"{command} > /dev/null"))
        rows[1][1].append(_time_shell(f"{command} | cat > /dev/null"))
    targets = [("zuno shell, disk artifacts", Path(tempfile.gettempdir()))]
    if Path("/dev/shm").is_dir():
        targets.append(("zuno shell, tmpfs artifacts", Path("/dev/shm")))
    sample: dict[str, Any] = {}
    for label, parent in targets:
        walls: list[float] = []
        peak = 0.0
        for _ in range(options.repeat):
            sample = _zuno(command, parent)
            walls.append(float(sample["wall"]))
            peak = max(peak, float(sample["rss_mib"]))
        rows.append((label, walls, peak))
    base = statistics.median(rows[0][1])
    print(f"command: {command}   (median of {options.repeat}; {os.cpu_count()} CPUs)")
    print(f"{'run':34} {'wall s':>8} {'ratio':>7} {'peak RSS MiB':>13}")
    for label, walls, rss in rows:
        wall = statistics.median(walls)
        rss_text = f"{rss:13.1f}" if rss is not None else f"{'-':>13}"
        print(f"{label:34} {wall:8.2f} {wall / base:7.2f} {rss_text}")
    data: dict[str, Any] = sample.get("data") or {}
    print(
        f"last zuno result: sandbox={data.get('sandbox')} "
        f"stdout_bytes={data.get('stdout_bytes')} output_bytes={sample.get('output_bytes')}"
    )


if __name__ == "__main__":
    main()
