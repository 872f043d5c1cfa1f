"""What a sandboxed shell call costs, end to end through ``Runtime.call``.

``bench_command_guard.py KIND [DSN]``: KIND is bubblewrap, landlock or none;
with a postgresql:// DSN the runtime's store is there (a store machines share:
each command then runs under its own deadline guard inside the sandbox, see
``zuno/durability/fencing.py``), else a SQLite file in a temporary folder. Prints the
median and the 90th percentile of 30 calls of ``true`` after one warm-up call.
Compare two checkouts by running it with ``PYTHONPATH=OTHER/src``.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

from zuno.config.loading import Config
from zuno.durability.store import open_store
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime


async def measure(rt: Runtime, calls: int = 30) -> list[float]:
    """Seconds of each of ``calls`` shell calls of ``true`` (after one warm-up call)."""
    session = rt.open_session()
    await rt.call(session, "shell", {"command": "true"})
    times: list[float] = []
    for _ in range(calls):
        start = time.perf_counter()
        result = await rt.call(session, "shell", {"command": "true"})
        times.append(time.perf_counter() - start)
        assert result.outcome.value == "ok", result.output
    return times


def main() -> None:
    kind = sys.argv[1]
    folder = Path(tempfile.mkdtemp())
    workspace = folder / "ws"
    workspace.mkdir()
    store = open_store(sys.argv[2]) if len(sys.argv) > 2 else open_store(folder / "z.db")
    config = Config.model_validate({"sandbox": {"kind": kind}})
    rt = Runtime(workspace, config=config, store=store, approver=ApproveAll())
    try:
        times = sorted(anyio.run(measure, rt))
    finally:
        rt.close()
    p90 = times[int(len(times) * 0.9) - 1]
    print(f"{kind}: median {statistics.median(times) * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms")


if __name__ == "__main__":
    main()
