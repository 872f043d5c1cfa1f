"""Startup time of the ``zuno`` command, each run a whole new process.

Measures ``zuno --help``, ``zuno tools`` and ``zuno call read`` beside
``python -c pass`` (the interpreter alone) and ``python -c "import zuno.cli"``
(the import alone), in a scratch workspace with no user configuration (so no
MCP server) and a scratch store. The rounds are interleaved so that a burst of
load elsewhere on the machine touches every command alike; one warm-up round
(page cache, ``.pyc`` files) is not counted.

The commands write to a pipe, as for a program; ``--tty`` adds ``zuno --help``
written to a pseudo-terminal (the coloured help a person sees). ``.pyc`` files
are used when present: a real install has them, an editable one run with
``PYTHONDONTWRITEBYTECODE=1`` may not (``python -m compileall -q src`` first).
``PYTHONPATH`` is passed on, so ``PYTHONPATH=/other/tree/src`` measures that tree.

Run: .venv/bin/python bench/bench_startup.py [--runs N] [--tty]
"""

from __future__ import annotations

import argparse
import os
import pty
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["main"]

ROOT = Path(__file__).resolve().parent.parent
PYTHON = Path(sys.executable)
ZUNO = PYTHON.parent / "zuno"


TTY_HELP = "zuno --help (terminal)"


def _commands(db: Path, tty: bool) -> list[tuple[str, list[str]]]:
    zuno = str(ZUNO)
    extra = [(TTY_HELP, [zuno, "--help"])] if tty else []
    return [
        ("python -c pass", [str(PYTHON), "-c", "pass"]),
        ('python -c "import zuno.cli"', [str(PYTHON), "-c", "import zuno.cli"]),
        ("zuno --help", [zuno, "--help"]),
        ("zuno tools", [zuno, "tools", "--db", str(db)]),
        (
            "zuno call read README.md",
            [zuno, "call", "read", '{"path": "README.md"}', "--db", str(db)],
        ),
        *extra,
    ]


def _run_once(
    argv: list[str], cwd: Path, env: dict[str, str], *, tty: bool = False
) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) milliseconds of one whole process; it must exit 0.

    The CPU time is the child's own (``wait4``): it hardly moves when other
    work shares the machine, while the wall-clock time does. ``tty``: stdout is
    a pseudo-terminal, read (and dropped) as the process writes.
    """
    with tempfile.TemporaryFile() as errors:
        master, slave = pty.openpty() if tty else (-1, -1)
        start = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=slave if tty else subprocess.DEVNULL,
            stderr=errors,
        )
        if tty:
            os.close(slave)
            drain = threading.Thread(target=_drain, args=(master,), daemon=True)
            drain.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = (time.perf_counter() - start) * 1000
        if tty:
            drain.join(timeout=10)
            os.close(master)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            errors.seek(0)
            raise SystemExit(
                f"{' '.join(argv)} exited {proc.returncode}:\n"
                + errors.read().decode(errors="replace")
            )
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def _zuno_home(env: dict[str, str]) -> str:
    """The folder of the zuno package the commands import (PYTHONPATH may name another tree)."""
    found = subprocess.run(
        [str(PYTHON), "-c", "import zuno, os; print(os.path.dirname(zuno.__file__))"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return found.stdout.strip()


def _drain(fd: int) -> None:
    """Read a pseudo-terminal until its process closes it (a full one would block it)."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:  # EIO: the other side is closed
        pass


def main(argv: list[str] | None = None) -> None:
    """Measure and print the table: wall-clock median, min and max, and CPU median, in ms."""
    parser = argparse.ArgumentParser(
        description="Startup time of zuno commands, each run a whole process (milliseconds)."
    )
    parser.add_argument("--runs", type=int, default=10, help="Runs of each command (default 10).")
    parser.add_argument(
        "--tty", action="store_true", help="Also time `zuno --help` written to a terminal."
    )
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        metavar="DIR",
        help="Measure the zuno tree in DIR (its src folder) instead of the installed one; "
        "give it twice to compare two trees, their runs interleaved.",
    )
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
        trees = (
            [("", env)]
            if not args.src
            else [
                (f"[{i + 1}] ", {**env, "PYTHONPATH": str(Path(src).resolve())})
                for i, src in enumerate(args.src)
            ]
        )
        runs: list[tuple[str, list[str], dict[str, str]]] = []
        for label, tree_env in trees:
            db = scratch / f"zuno{len(runs)}.db"
            runs += [(label + name, cmd, tree_env) for name, cmd in _commands(db, args.tty)]
        walls: dict[str, list[float]] = {name: [] for name, _, _ in runs}
        cpus: dict[str, list[float]] = {name: [] for name, _, _ in runs}
        for round_ in range(args.runs + 1):
            for name, command, tree_env in runs:
                tty = name.endswith(TTY_HELP)
                wall, cpu = _run_once(command, workspace, tree_env, tty=tty)
                if round_ > 0:  # the first round warms caches
                    walls[name].append(wall)
                    cpus[name].append(cpu)
    width = max(len(name) for name in walls)
    print(
        f"Startup, whole process, median of {args.runs} runs (ms); "
        f"{sys.platform}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}"
    )
    for label, tree_env in trees:
        print(f"{label}zuno imported from {_zuno_home(tree_env)}")
    print(f"{'command':<{width}}  {'wall':>6}  {'min':>6}  {'max':>6}  {'cpu':>6}")
    for name, values in walls.items():
        print(
            f"{name:<{width}}  {statistics.median(values):6.0f}  {min(values):6.0f}  "
            f"{max(values):6.0f}  {statistics.median(cpus[name]):6.0f}"
        )


if __name__ == "__main__":
    main()
