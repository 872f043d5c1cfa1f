"""Benchmark of checkpoints (:mod:`zuno.checkpoints`) on a large workspace.

Run with ``python bench/bench_checkpoints.py [--files 50000] [--repeats 9]``.
It builds a tree of small files (100 per folder) in a temporary folder, then
prints one table row per operation, with the median, fastest and slowest of
the repeats, and the median CPU time (this process and git's, user and system:
on a loaded machine, wall times mostly measure the wait for a CPU):

- the first snapshot (the shadow store is created and every file is hashed),
- a snapshot after a one-file change, by the object that took the previous one
  (what runs before each side-effecting call of a session: the folder watch
  names the changed paths), and by a new object each time (the cold path: the
  first snapshot of a process, or after the watch gave up: every file stat'ed),
- a snapshot when nothing changed (watched),
- ``zuno diff`` of a one-file call (the changed paths and the patch),
- an undo of a one-file call (the undo's own snapshot, the plan and the restore),
- and, to calibrate, one ``lstat`` of every file from Python: a snapshot must
  stat each file without the watch, so this is the cold path's floor on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from zuno.checkpoints import Checkpoints, checkpoints_for
from zuno.tools.undo import plan_undo

__all__ = ["main"]

_PER_FOLDER = 100


def _build(root: Path, files: int) -> list[Path]:
    made: list[Path] = []
    for i in range(files):
        folder = root / f"pkg{i // _PER_FOLDER:04d}"
        if i % _PER_FOLDER == 0:
            folder.mkdir()
        p = folder / f"mod{i % _PER_FOLDER:03d}.py"
        p.write_text(f"# module {i}\nVALUE = {i}\n")
        made.append(p)
    return made


_cpu: dict[int, float] = {}
"""CPU milliseconds (git's and this process's) of each timed run, by the id of its wall time."""


def _timed(action: Callable[[], object]) -> float:
    """Wall milliseconds of one run; its CPU milliseconds are kept in ``_cpu``."""
    before = os.times()
    start = time.perf_counter()
    action()
    wall = (time.perf_counter() - start) * 1000
    after = os.times()
    cpu = sum(after[:4]) - sum(before[:4])  # user + system, this process and its children
    result = float(wall)
    _cpu[id(result)] = cpu * 1000
    return result


def _row(label: str, times: list[float]) -> str:
    cpu = statistics.median(_cpu[id(t)] for t in times)
    return (
        f"| {label:<48} | {statistics.median(times):>9.1f} | {min(times):>8.1f} "
        f"| {max(times):>8.1f} | {cpu:>10.1f} | {len(times):>4} |"
    )


def main(argv: list[str] | None = None) -> None:
    """Build the tree, measure, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=50_000, help="files in the tree")
    parser.add_argument("--repeats", type=int, default=9, help="runs per operation")
    parser.add_argument("--first", type=int, default=1, help="runs of the first snapshot")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="zuno-bench-checkpoints-") as tmp:
        ws = Path(tmp, "ws")
        ws.mkdir()
        started = time.perf_counter()
        files = _build(ws, args.files)
        built = time.perf_counter() - started
        folders = args.files // _PER_FOLDER
        print(f"{args.files:,} files in {folders} folders, built in {built:.1f} s")
        counter = iter(range(1_000_000))

        def take(cp: Checkpoints) -> str:
            n = next(counter)
            return cp.take(call_id=f"call_{n}", tool="shell", session_id="ses_bench").commit

        first: list[float] = []
        for i in range(args.first):
            fresh = checkpoints_for(Path(tmp, f"artifacts{i}"), ws)
            first.append(_timed(lambda cp=fresh: take(cp)))

        def change(i: int) -> None:
            target = files[(i * 7919) % len(files)]
            target.write_text(target.read_text() + f"# change {i}\n")

        cold: list[float] = []
        for i in range(args.repeats):
            change(2000 + i)
            fresh = checkpoints_for(Path(tmp, "artifacts0"), ws)
            cold.append(_timed(lambda cp=fresh: take(cp)))
            fresh.close()

        cp = checkpoints_for(Path(tmp, "artifacts0"), ws)
        take(cp)  # this object's first snapshot (cold) starts its folder watch
        one_file: list[float] = []
        for i in range(args.repeats):
            change(i)
            one_file.append(_timed(lambda: take(cp)))

        unchanged = [_timed(lambda: take(cp)) for _ in range(args.repeats)]

        diffs: list[float] = []
        undos: list[float] = []
        for i in range(args.repeats):
            before = take(cp)
            change(1000 + i)

            def diff(before: str = before) -> None:
                after = cp.next_after(before) or cp.current_tree()
                cp.changes(before, after)
                cp.patch(before, after)

            diffs.append(_timed(diff))

            def undo(before: str = before) -> None:
                own = take(cp)  # the undo's own checkpoint, taken by the dispatcher
                plan = plan_undo(cp, before, own, "call")
                assert len(plan.targets) == 1, plan.targets
                cp.restore(plan.targets)

            undos.append(_timed(undo))

        load = os.getloadavg()[0]

        def stat_all() -> None:
            for p in files:
                os.lstat(p)

        floor = [_timed(stat_all) for _ in range(args.repeats)]

        print(f"load average {load:.2f} on {os.cpu_count()} CPUs; store {cp.git_dir}")
        print()
        print(f"| {'operation':<48} | median ms | min ms   | max ms   | CPU ms med | runs |")
        print(f"|{'-' * 50}|{'-' * 11}|{'-' * 10}|{'-' * 10}|{'-' * 12}|{'-' * 6}|")
        print(_row("lstat of every file (Python; the floor)", floor))
        print(_row("first snapshot (store created, all hashed)", first))
        print(_row("snapshot after a one-file change (watched)", one_file))
        print(_row("same, cold path (new object: all stat'ed)", cold))
        print(_row("snapshot, nothing changed", unchanged))
        print(_row("diff of a one-file call (paths + patch)", diffs))
        print(_row("undo of a one-file call (snapshot+plan+restore)", undos))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
