"""Benchmark of apply_patch: 100 chunks on a 100,000-line file (target: < 200 ms).

Run: .venv/bin/python bench/bench_patch.py [runs]

Each run restores the original file, then times the three phases separately:
parsing the patch text, verifying it against the file (read, locate every
chunk, build the new content and the diff) and writing (temporary file, fsync,
rename). It prints the median of the runs, plus the same patch when every line
carries trailing whitespace the patch lacks (so every chunk needs the second
matching level) and the whole tool call through ``ApplyPatchTool.run``.

Then the same patch through the whole runtime (``Runtime.call``: permission in
accept-edits mode, checkpoint, execute, persist) with checkpoints on and off in
alternation, in
one session as an agent would send it: the file is changed outside (new
bytes each time, as after an earlier edit) and read (untimed), so the
checkpoint before the call has a new pre-image of 100,000 lines to record.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from zuno.config.loading import Config
from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import ToolContext
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime
from zuno.tools.patch import ApplyPatchArgs, ApplyPatchTool
from zuno.workspace.checkpoints.store import CHECKPOINTS_ENV
from zuno.workspace.patch.apply import plan_patch
from zuno.workspace.patch.commit import commit_changes
from zuno.workspace.patch.parser import parse_patch

__all__ = ["main"]

LINES = 100_000
CHUNKS = 100


def make_file(suffix: str) -> bytes:
    """A Python-like file whose lines repeat often (realistic for indexing)."""
    out: list[str] = []
    for i in range(LINES):
        kind = i % 10
        if kind == 0:
            out.append(f"def function_{i}(value):")
        elif kind in (4, 8):
            out.append("")
        elif kind == 9:
            out.append("    return value")
        else:
            out.append(f"    value = value + {i}  # step {kind}")
    return "".join(line + suffix + "\n" for line in out).encode()


def make_patch() -> str:
    out = ["*** Begin Patch", "*** Update File: big.py"]
    step = LINES // CHUNKS
    for c in range(CHUNKS):
        at = c * step + 5  # a "value = ..." line, with 3 lines of context each side
        out.append(f"@@ def function_{c * step}(value):")
        out.extend(f" {_line(i)}" for i in range(at - 3, at))
        out.append(f"-{_line(at)}")
        out.append(f"+    value = value * {at}  # changed")
        out.extend(f" {_line(i)}" for i in range(at + 1, at + 4))
    out.append("*** End Patch")
    return "\n".join(out)


def _line(i: int) -> str:
    kind = i % 10
    if kind == 0:
        return f"def function_{i}(value):"
    if kind in (4, 8):
        return ""
    if kind == 9:
        return "    return value"
    return f"    value = value + {i}  # step {kind}"


def _context(workspace: Path) -> ToolContext:
    config: Any = None
    return ToolContext(
        workspace, "bench", "bench", 1, OutputLimits(), ArtifactStore(workspace / ".a"), config
    )


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return (time.perf_counter() - start) * 1000, value


def bench_phases(workspace: Path, original: bytes, patch: str, runs: int) -> dict[str, float]:
    target = workspace / "big.py"
    resolve = _context(workspace).resolve_writable
    times: dict[str, list[float]] = {"parse": [], "verify": [], "write": [], "total": []}
    for _ in range(runs):
        target.write_bytes(original)
        t_parse, parsed = _timed(lambda: parse_patch(patch))
        t_verify, plan = _timed(lambda: plan_patch(parsed, resolve))  # noqa: B023
        t_write, _ = _timed(lambda: commit_changes(plan.changes))  # noqa: B023
        times["parse"].append(t_parse)
        times["verify"].append(t_verify)
        times["write"].append(t_write)
        times["total"].append(t_parse + t_verify + t_write)
    assert target.read_bytes().count(b"# changed") == CHUNKS
    return {k: statistics.median(v) for k, v in times.items()}


def bench_tool(workspace: Path, original: bytes, patch: str, runs: int) -> float:
    target = workspace / "big.py"
    tool = ApplyPatchTool()
    ctx = _context(workspace)
    samples: list[float] = []
    for _ in range(runs):
        target.write_bytes(original)
        start = time.perf_counter()
        anyio.run(tool.run, ApplyPatchArgs(patch=patch), ctx)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


async def _runtime_calls(
    workspace: Path, original: bytes, patch: str, runs: int
) -> list[tuple[float, float]]:
    """Median wall and CPU ms (all threads) of apply_patch through ``Runtime.call``:
    checkpoints off, then on."""
    target = workspace / "big.py"
    target.write_bytes(original)
    # accept-edits: the edit is not put to an approver, whose request would carry a
    # preview (the whole patch verified once more, tens of milliseconds here).
    config = Config.model_validate({"permission": {"mode": "accept-edits"}})
    rt = Runtime(
        workspace, config=config, db_path=workspace / ".data" / "zuno.db", approver=ApproveAll()
    )
    session = rt.open_session()
    samples: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    try:
        for n in range(runs + 1):
            for on in (True, False) if n % 2 == 0 else (False, True):
                os.environ[CHECKPOINTS_ENV] = "on" if on else "off"
                # New bytes each time (as after an earlier edit): the checkpoint
                # must copy this pre-image, not find it already stored.
                target.write_bytes(original + f"# round {n} {on}\n".encode())
                read = await rt.call(session, "read", {"path": "big.py", "limit": 1})
                assert read.outcome.value == "ok", read
                start, cpu = time.perf_counter(), time.process_time()
                result = await rt.call(session, "apply_patch", {"patch": patch})
                took = (
                    (time.perf_counter() - start) * 1000,
                    (time.process_time() - cpu) * 1000,
                )
                assert result.outcome.value == "ok", result
                if n > 0:  # the first round: the store's first look, imports
                    samples[on].append(took)
    finally:
        rt.close()
        os.environ.pop(CHECKPOINTS_ENV, None)
    return [
        (statistics.median(w for w, _ in samples[on]), statistics.median(c for _, c in samples[on]))
        for on in (False, True)
    ]


def main() -> None:
    """Run the benchmark and print the table."""
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    patch = make_patch()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        exact = make_file("")
        fuzzy = make_file("  ")
        rows = [
            ("exact match", bench_phases(workspace, exact, patch, runs)),
            ("trailing-ws match", bench_phases(workspace, fuzzy, patch, runs)),
        ]
        tool_ms = bench_tool(workspace, exact, patch, runs)
        (off_ms, off_cpu), (on_ms, on_cpu) = anyio.run(
            _runtime_calls, workspace, exact, patch, runs
        )
    print(f"apply_patch: {CHUNKS} chunks on a {LINES:,}-line file, median of {runs} runs (ms)")
    print(f"{'case':<20}{'parse':>9}{'verify':>9}{'write':>9}{'total':>9}")
    for name, t in rows:
        print(
            f"{name:<20}{t['parse']:>9.1f}{t['verify']:>9.1f}{t['write']:>9.1f}{t['total']:>9.1f}"
        )
    print(f"{'tool call (exact)':<20}{'':>27}{tool_ms:>9.1f}")
    print(f"{'Runtime.call, checkpoints off (CPU)':<47}{off_ms:>9.1f} ({off_cpu:.1f})")
    print(f"{'Runtime.call, checkpoints on (CPU)':<47}{on_ms:>9.1f} ({on_cpu:.1f})")


if __name__ == "__main__":
    main()
