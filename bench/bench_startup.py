"""Startup time of the ``zuno`` command, each run a whole new process.

Measures ``zuno --help``, ``zuno tools`` and ``zuno call read`` beside
``python -c pass`` (the interpreter alone) and ``python -c "import zuno.cli"``
(the import alone), in a scratch workspace with no user configuration (so no
MCP server) and a scratch store. The rounds are interleaved so that a burst of
load elsewhere on the machine touches every command alike; one warm-up round
(page cache, ``.pyc`` files) is not counted.

Run: .venv/bin/python bench/bench_startup.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
PYTHON = Path(sys.executable)
ZUNO = PYTHON.parent / "zuno"


def _commands(db: Path) -> list[tuple[str, list[str]]]:
    zuno = str(ZUNO)
    return [
        ("python -c pass", [str(PYTHON), "-c", "pass"]),
        ('python -c "import zuno.cli"', [str(PYTHON), "-c", "import zuno.cli"]),
        ("zuno --help", [zuno, "--help"]),
        ("zuno tools", [zuno, "tools", "--db", str(db)]),
        (
            "zuno call read README.md",
            [zuno, "call", "read", '{"path": "README.md"}', "--db", str(db)],
        ),
    ]


def _run_once(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) milliseconds of one whole process; it must exit 0.

    The CPU time is the child's own (``wait4``): it hardly moves when other
    work shares the machine, while the wall-clock time does.
    """
    with tempfile.TemporaryFile() as errors:
        start = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = (time.perf_counter() - start) * 1000
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            errors.seek(0)
            raise SystemExit(
                f"{' '.join(argv)} exited {proc.returncode}:\n"
                + errors.read().decode(errors="replace")
            )
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def main(argv: list[str] | None = None) -> None:
    """Measure and print the table: wall-clock median, min and max, and CPU median, in ms."""
    parser = argparse.ArgumentParser(
        description="Startup time of zuno commands, each run a whole process (milliseconds)."
    )
    parser.add_argument("--runs", type=int, default=10, help="Runs of each command (default 10).")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    with tempfile.TemporaryDirectory(prefix="zuno-bench-startup-") as tmp:
        scratch = Path(tmp)
        workspace = scratch / "ws"
        workspace.mkdir()
        shutil.copyfile(ROOT / "README.md", workspace / "README.md")
        env = {
            **os.environ,
            "ZUNO_CONFIG_HOME": str(scratch / "config"),  # no user zuno.json: no MCP server
            "XDG_DATA_HOME": str(scratch / "data"),
            "XDG_CACHE_HOME": str(scratch / "cache"),
        }
        env.pop("ZUNO_DB", None)
        commands = _commands(scratch / "zuno.db")
        walls: dict[str, list[float]] = {name: [] for name, _ in commands}
        cpus: dict[str, list[float]] = {name: [] for name, _ in commands}
        for round_ in range(args.runs + 1):
            for name, command in commands:
                wall, cpu = _run_once(command, workspace, env)
                if round_ > 0:  # the first round warms caches
                    walls[name].append(wall)
                    cpus[name].append(cpu)
    width = max(len(name) for name in walls)
    print(
        f"Startup, whole process, median of {args.runs} runs (ms); "
        f"{sys.platform}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}"
    )
    print(f"{'command':<{width}}  {'wall':>6}  {'min':>6}  {'max':>6}  {'cpu':>6}")
    for name, values in walls.items():
        print(
            f"{name:<{width}}  {statistics.median(values):6.0f}  {min(values):6.0f}  "
            f"{max(values):6.0f}  {statistics.median(cpus[name]):6.0f}"
        )


if __name__ == "__main__":
    main()
