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

Each ``zuno`` command is measured three ways: ``cold`` runs it in its own process
(``ZUNO_SERVER=off``, as the very first command does; ``--help`` and ``tools``
then come from the startup cache, :mod:`zuno.cli.startup_cache`, filled by the
warm-up round), ``nocache`` the same with ``ZUNO_STARTUP_CACHE=off`` (the first
run after an install or upgrade), and ``served`` through
the command server (:mod:`zuno.cli.cmdserver`), started and awaited before the
rounds begin, in a private run folder, and stopped at the end. For a served
command the CPU column is the launcher's own: the work is done by the
server's forked child.

Run: .venv/bin/python bench/bench_startup.py [--runs N] [--tty] [--mode cold|served|both]
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
        drain: threading.Thread | None = None
        if tty:
            os.close(slave)
            drain = threading.Thread(target=_drain, args=(master,), daemon=True)
            drain.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = (time.perf_counter() - start) * 1000
        if drain is not None:
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


def _server(zuno: str, env: dict[str, str], action: str) -> None:
    """``start``: start the command server and wait until it answers; ``stop``: stop it."""
    if action == "stop":
        subprocess.run([zuno, "server", "stop"], env=env, capture_output=True, check=False)
        return
    subprocess.run([zuno, "tools"], env=env, capture_output=True, check=True)
    for _ in range(600):  # the server imports everything once: seconds on a loaded machine
        state = subprocess.run(
            [zuno, "server", "status", "--json"], env=env, capture_output=True, text=True
        )
        if '"running": true' in state.stdout:
            return
        time.sleep(0.2)
    raise SystemExit("the command server did not start (see its log in XDG_RUNTIME_DIR/zuno)")


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


def _rounds(
    count: int, runs: list[tuple[str, list[str], dict[str, str]]], workspace: Path
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall-clock and CPU milliseconds of every run, the commands interleaved round by round."""
    walls: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    cpus: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    for round_ in range(count + 1):
        for name, command, env in runs:
            tty = TTY_HELP in name
            wall, cpu = _run_once(command, workspace, env, tty=tty)
            if round_ > 0:  # the first round warms caches
                walls[name].append(wall)
                cpus[name].append(cpu)
    return walls, cpus


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
        "--mode",
        choices=["cold", "nocache", "served", "both", "all"],
        default="all",
        help="cold: ZUNO_SERVER=off (--help and tools from the startup cache); nocache: "
        "cold with ZUNO_STARTUP_CACHE=off (the first run after an upgrade); served: through "
        "the command server; both: cold and served; all (default): the three.",
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
        modes = {"both": ["cold", "served"], "all": ["cold", "nocache", "served"]}.get(
            args.mode, [args.mode]
        )
        runs: list[tuple[str, list[str], dict[str, str]]] = []
        servers: list[dict[str, str]] = []
        for label, tree_env in trees:
            for mode in modes:
                mode_env = {**tree_env, "ZUNO_SERVER": "on" if mode == "served" else "off"}
                if mode == "nocache":
                    mode_env["ZUNO_STARTUP_CACHE"] = "off"
                if mode == "served":
                    run_folder = scratch / f"run{len(servers)}"
                    run_folder.mkdir(mode=0o700)
                    mode_env["XDG_RUNTIME_DIR"] = str(run_folder)
                    mode_env["ZUNO_SERVER_IDLE"] = "3600"
                    servers.append(mode_env)
                db = scratch / f"zuno{len(runs)}.db"
                for name, cmd in _commands(db, args.tty):
                    if name.startswith("python"):
                        if mode != modes[0]:
                            continue  # the interpreter alone: once per tree
                        runs.append((label + name, cmd, mode_env))
                    else:
                        runs.append((f"{label}{name} [{mode}]", cmd, mode_env))
        try:
            for server_env in servers:
                _server(str(ZUNO), {**server_env, "PWD": str(workspace)}, "start")
            walls, cpus = _rounds(args.runs, runs, workspace)
        finally:
            for server_env in servers:
                _server(str(ZUNO), server_env, "stop")
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
