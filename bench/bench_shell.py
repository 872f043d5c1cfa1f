"""Benchmark: a command printing 200 MB through ``zuno call shell``, against ``| cat``.

The yardstick is ``sh -c 'CMD | cat > /dev/null'``: the same command with a
process reading its pipe, which any reader pays. Rows, run round-robin so that
the machine's noise falls on all of them alike:

- ``| cat > /dev/null``: the yardstick (ratio 1.00);
- ``> /dev/null``: no reader at all;
- ``| cat > FILE``: a reader that keeps all of the output on disk (Zuno keeps
  64 MiB of it, the default ``tool_output.artifact_max_bytes``, but writes it all);
- ``API``: :meth:`zuno.session.runtime.Runtime.dispatch` of one ``shell`` call in a child
  Python process, timed around the dispatch alone (the call is recorded in a
  SQLite store, the workspace checkpointed, the sandbox started, the output
  read, bounded and kept as an artifact under the default caps), with the
  store on disk and on tmpfs (``/dev/shm``);
- ``CLI``: ``zuno call shell '{"command": CMD}' --yes`` as a whole process, in
  its own process (``ZUNO_SERVER=off``) and through the command server (started
  and awaited first, in a private run folder, stopped at the end);
- ``CLI, served, true``: ``zuno call shell`` of ``true``, the fixed cost of the
  served command around any output.

Columns: the minimum and median wall time, the median's ratio to the
yardstick's median, and the median CPU seconds of the timed process (Zuno's
own for the API rows: the sandboxed command's CPU is lost to rusage in
bubblewrap's PID namespace).

Run: ``.venv/bin/python bench/bench_shell.py [--size BYTES] [--repeat N] [--lines]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["main"]

ZUNO = Path(sys.executable).parent / "zuno"

_CHILD = r"""
import json, resource, sys, time
from pathlib import Path
import anyio
from zuno.contract.calls import CallRequest
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

workspace, db, command, repeat = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])

def cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime

async def main() -> None:
    rt = Runtime(workspace, db_path=db, approver=ApproveAll())
    async with rt:
        for _ in range(repeat):
            if not sys.stdin.readline():  # the parent's turn to time this row, or its end
                break
            state = rt.open_session(agent="build")
            cpu_before, started = cpu(), time.perf_counter()
            (result,) = await rt.dispatch(state, [CallRequest("shell", {"command": command})])
            wall, used = time.perf_counter() - started, cpu() - cpu_before
            assert result.outcome.value == "ok", result.result
            print(json.dumps({"wall": wall, "cpu": used, "bytes": result.data["stdout_bytes"]}),
                  flush=True)
    rt.close()

anyio.run(main)
"""


Run = Callable[[], tuple[float, float]]


@dataclass
class _Row:
    label: str
    run: Run
    walls: list[float] = field(default_factory=lambda: [])
    cpus: list[float] = field(default_factory=lambda: [])


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _process(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    def run() -> tuple[float, float]:
        cpu, started = _children_cpu(), time.perf_counter()
        done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{argv[:3]} failed with exit status {done.returncode}")
        return wall, _children_cpu() - cpu

    return run


class _Api:
    """One child interpreter per row, dispatching a call each time it is asked."""

    def __init__(self, command: str, folder: Path, repeat: int) -> None:
        workspace = folder / "ws"
        workspace.mkdir(parents=True)
        argv = [sys.executable, "-c", _CHILD, str(workspace), str(folder / "store.db")]
        # One call more than counted: the first one, not counted, warms the caches.
        self._child = subprocess.Popen(
            [*argv, command, str(repeat + 1)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.run()

    def run(self) -> tuple[float, float]:
        """Let the child dispatch one call; its wall and CPU seconds."""
        assert self._child.stdin is not None and self._child.stdout is not None
        self._child.stdin.write("go\n")
        self._child.stdin.flush()
        line = self._child.stdout.readline()
        if not line:
            raise SystemExit("the API child ended early (see its error above)")
        found = json.loads(line)
        return float(found["wall"]), float(found["cpu"])

    def close(self) -> None:
        """Let the child end."""
        if self._child.stdin is not None:
            self._child.stdin.close()
        self._child.wait(timeout=600)


def _start_server(env: dict[str, str], workspace: Path) -> None:
    subprocess.run([str(ZUNO), "tools"], env=env, cwd=workspace, capture_output=True)
    for _ in range(600):  # the server imports everything once: a bounded wait
        state = subprocess.run(
            [str(ZUNO), "server", "status", "--json"], env=env, capture_output=True, text=True
        )
        if json.loads(state.stdout or "{}").get("running"):
            return
        time.sleep(0.2)
    raise SystemExit("the command server did not start")


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description="Benchmark zuno call shell on a big output.")
    parser.add_argument("--size", type=int, default=200_000_000, help="bytes printed")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--lines", action="store_true", help="print 80-byte lines instead of one endless line"
    )
    options = parser.parse_args()
    if options.lines:
        command = f"yes \"$(printf '%079d' 0)\" | head -c {options.size}"
    else:
        command = f"head -c {options.size} /dev/zero | tr '\\0' 'a'"
    scratch = Path(tempfile.mkdtemp(prefix="zuno-bench-shell-"))
    shm = Path(tempfile.mkdtemp(prefix="zuno-bench-shell-", dir="/dev/shm"))
    run_dir = Path(tempfile.mkdtemp(prefix="zb-", dir="/tmp"))
    os.chmod(run_dir, 0o700)
    workspace = scratch / "cli-ws"
    workspace.mkdir()
    env = {
        **os.environ,
        "ZUNO_DB": str(scratch / "cli.db"),
        "XDG_RUNTIME_DIR": str(run_dir),
        "ZUNO_SERVER": "off",
    }
    served_env = {**env, "ZUNO_SERVER": "on"}
    call = [str(ZUNO), "call", "shell", json.dumps({"command": command}), "--yes"]
    true_call = [str(ZUNO), "call", "shell", json.dumps({"command": "true"}), "--yes"]
    apis: list[_Api] = []
    try:
        _start_server(served_env, workspace)
        api_disk = _Api(command, scratch / "api", options.repeat)
        api_shm = _Api(command, shm / "api", options.repeat)
        apis += [api_disk, api_shm]
        rows = [
            _Row("| cat > /dev/null", _process(["sh", "-c", f"{command} | cat > /dev/null"])),
            _Row("> /dev/null", _process(["sh", "-c", f"{command} > /dev/null"])),
            _Row("| cat > FILE", _process(["sh", "-c", f"{command} | cat > {scratch / 'out'}"])),
            _Row("API, store on disk", api_disk.run),
            _Row("API, store on tmpfs", api_shm.run),
            _Row("CLI, own process", _process(call, env, workspace)),
            _Row("CLI, served", _process(call, served_env, workspace)),
            _Row("CLI, served, true", _process(true_call, served_env, workspace)),
        ]
        for row in rows:  # a warm-up round, not counted
            if not row.label.startswith("API"):
                row.run()
        for _ in range(options.repeat):
            for row in rows:
                wall, cpu = row.run()
                row.walls.append(wall)
                row.cpus.append(cpu)
    finally:
        for api in apis:
            api.close()
        subprocess.run([str(ZUNO), "server", "stop"], env=served_env, capture_output=True)
        for folder in (scratch, shm, run_dir):
            shutil.rmtree(folder, ignore_errors=True)
    base = statistics.median(rows[0].walls)
    print(f"command: {command}   ({options.repeat} runs each; {os.cpu_count()} CPUs)")
    print(f"{'run':24} {'min s':>6} {'median':>7} {'ratio':>6} {'CPU s':>6}")
    for row in rows:
        wall = statistics.median(row.walls)
        print(
            f"{row.label:24} {min(row.walls):6.2f} {wall:7.2f} {wall / base:6.2f} "
            f"{statistics.median(row.cpus):6.2f}"
        )


if __name__ == "__main__":
    main()
