"""A lease's fence covers the time the lease is held, and no longer.

A process may hold several leases one after another (a test run, a host serving
several stores, a runtime opened and closed per request). A lease whose store
was closed without stopping it, or one that was stopped while another is held,
must not go on killing the commands this process starts later: that killed
unrelated commands 25 s after a store closed.

Each check runs in a process of its own: the fence is per process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_RUN = """
from pathlib import Path
import anyio
from zuno.execution.process import run_process

async def command() -> str:
    out: list[bytes] = []
    result = await run_process(
        ["sh", "-c", "sleep 2; echo finished"],
        cwd=Path.cwd(),
        env={"PATH": "/usr/bin:/bin"},
        time_limit=None,
        on_stdout=out.append,
        on_stderr=lambda chunk: None,
    )
    return b"".join(out).decode() + repr(getattr(result, "exit_code", result))
"""

_CLOSED_STORE = (
    """
import sys
from zuno.durability.store import open_store
from zuno.durability.workers import WorkerLease
"""
    + _RUN
    + """
store = open_store(Path(sys.argv[1]))
lease = WorkerLease(store, lease_seconds=1.2)   # fence deadline 1 s after now
store.close()                                  # closed, the lease never stopped
lease._thread.join(timeout=60)                 # its heartbeat noticed and ended
print(anyio.run(command), flush=True)          # runs past the old deadline
"""
)

_TWO_LEASES = (
    """
import sys
from zuno.durability.store import open_store
from zuno.durability.workers import WorkerLease
from zuno.durability import fencing
"""
    + _RUN
    + """
long_store = open_store(Path(sys.argv[1]))
short_store = open_store(Path(sys.argv[2]))
held = WorkerLease(long_store, lease_seconds=60)
ended = WorkerLease(short_store, lease_seconds=30)
ended.stop()
# The lease still held keeps its fence; the one that ended has none.
assert list(fencing._fences) == [held.fence_holder]
print(anyio.run(command), flush=True)
held.stop()
assert not fencing._fences
"""
)

_ONE_LAPSES = (
    """
import sys
from zuno.durability.store import open_store
from zuno.durability.workers import WorkerLease
from zuno.durability import fencing
"""
    + _RUN
    + """
stores = [open_store(Path(sys.argv[2])), open_store(Path(sys.argv[1]))]
kept = WorkerLease(stores[0], lease_seconds=60)
lapsing = WorkerLease(stores[1], lease_seconds=1.2)

def cut() -> None:
    raise OSError("the connection is cut")

lapsing.heartbeat = cut   # its renewals fail from now on: it fences at its deadline

async def both() -> tuple[str, str]:
    results: dict[str, str] = {}

    async def under(name: str, lease: WorkerLease) -> None:
        with fencing.holding(lease.fence_holder):
            results[name] = await command()

    async with anyio.create_task_group() as tg:
        tg.start_soon(under, "lapsing", lapsing)
        tg.start_soon(under, "kept", kept)
    return results["lapsing"], results["kept"]

lapsed, other = anyio.run(both)
print(repr(lapsed))
print(repr(other))
kept.stop()
"""
)


_STALE_LEASE = """
import os, sys
from pathlib import Path
import anyio
from zuno.durability import fencing
from zuno.execution.process import run_process
from zuno.execution.sandbox import NoSandbox, SandboxPolicy, prepared_launch
from zuno.durability.store import open_store
from zuno.durability.workers import WorkerLease

held = WorkerLease(open_store(Path(sys.argv[1])), lease_seconds=60)
# Another lease of this process fenced long ago and was never renewed (its store
# unreachable for good): its deadline is past.
fencing._renewed(12345, fencing.fence_clock() - 5)


async def command() -> str:
    out: list[bytes] = []
    policy = SandboxPolicy(mode="workspace-write", workspace=Path.cwd())
    argv = ["sh", "-c", "sleep 1; echo finished"]
    with prepared_launch(
        NoSandbox(), argv, policy, cwd=Path.cwd(), env=dict(os.environ), deadline=True,
        time_limit=60,
    ) as launch:
        await run_process(
            launch.argv, cwd=launch.cwd, env=launch.env, time_limit=60,
            on_stdout=out.append, on_stderr=lambda chunk: None, pass_fds=launch.pass_fds,
        )
    return b"".join(out).decode()


print(anyio.run(command), flush=True)
"""


def _run(script: str, *args: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_lease_left_on_a_closed_store_kills_nothing_later(tmp_path: Path) -> None:
    out = _run(_CLOSED_STORE, tmp_path / "z.db")
    assert out.startswith("finished"), out


def test_a_stopped_lease_neither_kills_nor_lifts_another(tmp_path: Path) -> None:
    out = _run(_TWO_LEASES, tmp_path / "a.db", tmp_path / "b.db")
    assert out.startswith("finished"), out


def test_a_lapsed_lease_kills_its_own_commands_and_not_another_leases(tmp_path: Path) -> None:
    lapsed, other = _run(_ONE_LAPSES, tmp_path / "a.db", tmp_path / "b.db").splitlines()
    assert "finished" not in lapsed, "the lapsed lease's command ran on"
    assert "finished" in other, f"another lease's command was killed: {other}"


def test_a_lease_fenced_for_good_does_not_kill_the_commands_started_later(tmp_path: Path) -> None:
    """Its deadline passed long ago: a command guarded under the lease still held runs on."""
    out = _run(_STALE_LEASE, tmp_path / "z.db")
    assert out.startswith("finished"), out
