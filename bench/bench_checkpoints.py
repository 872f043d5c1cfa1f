"""Benchmark: what checkpoints add to a side-effecting call, at 1k, 50k and 200k files.

Run with ``python bench/bench_checkpoints.py [--sizes 1000,50000,200000] [--repeats 15]``.

For each tree size it builds a workspace of small files (100 per folder) in a
temporary folder and dispatches real ``write`` calls (one changed file each)
through a runtime (``Runtime.call``: permission, checkpoint, execute, persist),
with checkpoints on and off in alternation (``ZUNO_CHECKPOINTS``), so both
see the same machine load. It prints, per size:

- the median call with checkpoints off and on, and the increment (on - off);
- the first side-effecting call of a fresh runtime and store: without the
  background look (the full look inside the call); right after the look that an
  agent session starts in the background (``Dispatcher.prepare_checkpoints``)
  began, while it runs (a file tool's call records its pre-images and does not
  wait; "[look over]" when the look had already ended); and after that look has
  finished; and how long that background look took;
- the size of the shadow store, beside the size of the workspace's files.

CPU milliseconds (this process and git's) are shown beside the wall times: on a
loaded machine wall times mostly measure the wait for a CPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from zuno.config.loading import Config
from zuno.dispatch.session_state import SessionState
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime
from zuno.workspace.checkpoints.store import CHECKPOINTS_ENV

__all__ = ["main"]

_PER_FOLDER = 100
_BUILT = ".built"  # beside a tree that --trees may reuse


def _build(root: Path, files: int) -> int:
    """Lay ``files`` small files out under ``root``; their total size in bytes."""
    total = 0
    for i in range(files):
        folder = root / f"pkg{i // _PER_FOLDER:04d}"
        if i % _PER_FOLDER == 0:
            folder.mkdir()
        data = f"# module {i}\nVALUE = {i}\n"
        (folder / f"mod{i % _PER_FOLDER:03d}.py").write_text(data)
        total += len(data)
    return total


def _runtime(ws: Path, data: Path) -> Runtime:
    data.mkdir(parents=True, exist_ok=True)
    return Runtime(ws, config=Config(), db_path=data / "zuno.db", approver=ApproveAll())


async def _timed(action: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    """Wall and CPU milliseconds (this process and its children) of one run."""
    before = _cpu()
    start = time.perf_counter()
    await action()
    wall = (time.perf_counter() - start) * 1000
    return wall, (_cpu() - before) * 1000


def _cpu() -> float:
    """CPU seconds of this process and its finished children (microsecond accounting)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _set(on: bool) -> None:
    os.environ[CHECKPOINTS_ENV] = "on" if on else "off"


def _du(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=False)
    return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout else 0


def _path(n: int, files: int) -> str:
    i = (n * 7919) % files
    return f"pkg{i // _PER_FOLDER:04d}/mod{i % _PER_FOLDER:03d}.py"


async def _read(rt: Runtime, session: SessionState, n: int, files: int) -> None:
    """The read a write of an existing file needs first (not timed)."""
    result = await rt.call(session, "read", {"path": _path(n, files)})
    assert result.outcome.value == "ok", result


async def _write(rt: Runtime, session: SessionState, n: int, files: int) -> None:
    """Change one existing file (read before, untimed)."""
    result = await rt.call(session, "write", {"path": _path(n, files), "content": f"# {n}\n"})
    assert result.outcome.value == "ok", result


async def _measure(files: int, repeats: int, tmp: Path, trees: Path | None) -> dict[str, float]:
    ws = (trees / f"ws-{files}") if trees is not None else tmp / "ws"
    marker = ws.with_name(ws.name + _BUILT)
    if trees is not None and marker.exists():
        print(f"  {files:,} files: reusing {ws}", flush=True)
    else:
        shutil.rmtree(ws, ignore_errors=True)
        ws.mkdir(parents=True)
        started = time.perf_counter()
        size = _build(ws, files)
        built = time.perf_counter() - started
        if trees is not None:
            marker.write_text("")
        print(f"  {files:,} files ({size / 1e6:.1f} MB) built in {built:.1f} s", flush=True)
    found: dict[str, float] = {}

    # Warm up (the tools' modules imported) on another workspace, checkpoints off.
    _set(False)
    (tmp / "warm").mkdir()
    (tmp / "warm" / "f.py").write_text("x\n")
    rt = _runtime(tmp / "warm", tmp / "data-warm")
    session = rt.open_session()
    await rt.call(session, "read", {"path": "f.py"})
    await rt.call(session, "write", {"path": "f.py", "content": "y\n"})
    rt.close()

    # The first call, the old way: the full look inside the call.
    _set(True)
    rt = _runtime(ws, tmp / "data-inline")
    session = rt.open_session()
    await _read(rt, session, 1, files)
    found["first_inline"], found["first_inline_cpu"] = await _timed(
        lambda: _write(rt, session, 1, files)
    )
    rt.close()

    # The first call while that look still runs (a file tool's call does not wait).
    rt = _runtime(ws, tmp / "data-during")
    session = rt.open_session()
    await _read(rt, session, 3, files)
    rt.dispatcher.prepare_checkpoints(session.surface.tools)
    found["first_during_look"], found["first_during_look_cpu"] = await _timed(
        lambda: _write(rt, session, 3, files)
    )
    checkpoints = rt.dispatcher.checkpoints
    found["look_still_running"] = float(checkpoints.looking())
    rt.close()  # waits for the look, then gives the call its checkpoint

    # The first call after the look an agent session starts in the background.
    rt = _runtime(ws, tmp / "data-bg")
    session = rt.open_session()
    begun = time.perf_counter()
    rt.dispatcher.prepare_checkpoints(session.surface.tools)
    preparing = rt.dispatcher.checkpoints._preparing  # pyright: ignore[reportPrivateUsage]
    if preparing is not None:
        await anyio.to_thread.run_sync(preparing.join)
    found["background_look"] = (time.perf_counter() - begun) * 1000
    await _read(rt, session, 2, files)
    found["first_after_look"], found["first_after_look_cpu"] = await _timed(
        lambda: _write(rt, session, 2, files)
    )

    # Then calls, on and off in alternation (the order flips every round).
    on: list[tuple[float, float]] = []
    off: list[tuple[float, float]] = []
    for n in range(repeats):
        for checkpoints in (True, False) if n % 2 == 0 else (False, True):
            _set(checkpoints)
            k = 10 + 2 * n + checkpoints
            await _read(rt, session, k, files)
            timed = await _timed(lambda k=k: _write(rt, session, k, files))
            (on if checkpoints else off).append(timed)
    found["on"] = statistics.median(w for w, _ in on)
    found["off"] = statistics.median(w for w, _ in off)
    found["on_cpu"] = statistics.median(c for _, c in on)
    found["off_cpu"] = statistics.median(c for _, c in off)
    found["store_mb"] = _du(rt.dispatcher.checkpoints.git_dir) / 1e6
    found["tree_mb"] = _du(ws) / 1e6
    rt.close()
    _set(True)
    return found


def main(argv: list[str] | None = None) -> None:
    """Measure each size, print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,50000,200000", help="tree sizes, in files")
    parser.add_argument("--repeats", type=int, default=15, help="calls per side (on, off)")
    parser.add_argument(
        "--dir", default=None, help="where to build the trees (default: the system's temp folder)"
    )
    parser.add_argument(
        "--trees",
        default=None,
        help="keep the trees in this folder and reuse them in later runs (a 200,000-file "
        "tree takes minutes to build); the stores are new each run",
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    rows: dict[int, dict[str, float]] = {}
    for files in sizes:
        tmp = Path(tempfile.mkdtemp(prefix="zuno-bench-checkpoints-", dir=args.dir))
        try:
            trees = Path(args.trees).resolve() if args.trees else None
            rows[files] = anyio.run(_measure, files, args.repeats, tmp, trees)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()[0]
    print(f"\nload average {load:.2f} on {os.cpu_count()} CPUs; {args.repeats} calls per side")
    print()
    head = "| measure (ms, wall median; CPU in brackets) |"
    print(head + "".join(f" {f:>13,} files |" for f in sizes))
    print("|" + "-" * (len(head) - 2) + "|" + "|".join("-" * 20 for _ in sizes) + "|")

    def row(label: str, cell: Callable[[dict[str, float]], str]) -> None:
        print(f"| {label:<42} |" + "".join(f" {cell(rows[f]):>19} |" for f in sizes))

    row("write call, checkpoints off", lambda r: f"{r['off']:.1f} ({r['off_cpu']:.0f})")
    row("write call, checkpoints on", lambda r: f"{r['on']:.1f} ({r['on_cpu']:.0f})")
    row("per-call increment (on - off)", lambda r: f"{r['on'] - r['off']:.1f}")
    row(
        "first call, full look inside it",
        lambda r: f"{r['first_inline']:.0f} ({r['first_inline_cpu']:.0f})",
    )
    row(
        "first call during the background look",
        lambda r: (
            f"{r['first_during_look']:.1f} ({r['first_during_look_cpu']:.0f})"
            + ("" if r["look_still_running"] else " [look over]")
        ),
    )
    row("background look at session start", lambda r: f"{r['background_look']:.0f}")
    row(
        "first call after the background look",
        lambda r: f"{r['first_after_look']:.1f} ({r['first_after_look_cpu']:.0f})",
    )
    row("shadow store size (MB)", lambda r: f"{r['store_mb']:.1f}")
    row("workspace size on disk (MB)", lambda r: f"{r['tree_mb']:.1f}")
    if len(sizes) > 1:
        small, large = rows[sizes[0]], rows[sizes[-1]]
        ratio = (large["on"] - large["off"]) / max(small["on"] - small["off"], 0.1)
        print(f"\nincrement ratio {sizes[-1]:,} / {sizes[0]:,} files: {ratio:.2f}x")


if __name__ == "__main__":
    main()
