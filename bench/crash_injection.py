"""Crash injection: 1,000 ``kill -9`` of a runtime in the middle of side-effecting sessions.

Run: ``.venv/bin/python bench/crash_injection.py [--kills 1000] [--seed N]``

Each round forks a child that resumes a session and keeps dispatching
``append`` calls (each appends a unique id to a file) beside read-only
``peek`` calls; the child is killed with SIGKILL at a random instant (a fifth
of the time it kills itself inside an ``append``, just before or just after
the effect). The parent then checks the store against the files, settles the
dead child's calls as a resume does and checks the recovery notice. The
harness is shared with the test suite: ``tests/recovery/crash_harness.py``.

``--mcp-kills N`` runs the MCP campaign instead (``tests/mcp/mcp_kill_harness.py``):
rounds of a runtime calling a stdio and a streamable-HTTP MCP server beside
built-in calls, SIGKILLing the servers mid-call until N kills were sent. Give
both options to run both campaigns.

It prints a table of figures; the rows marked ``must be 0`` are violations of
crash safety, and the script exits with status 1 when any is not 0.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "recovery"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "mcp"))

from crash_harness import describe, figures_table, run_campaign

__all__ = ["main"]


def _print_table(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(label) for label, _ in rows)
    print(title)
    print(f"| {'figure'.ljust(width)} | value |")
    print(f"| {'-' * width} | ----: |")
    for label, value in rows:
        print(f"| {label.ljust(width)} | {value} |")


def _runtime_kills(kills: int, seed: int) -> bool:
    """The store campaign; whether it saw no violation."""
    with tempfile.TemporaryDirectory(prefix="zuno-crash-") as tmp:
        fig = run_campaign(Path(tmp), kills, seed=seed)
    _print_table(f"crash injection, seed {seed}", figures_table(fig))
    if fig.violations:
        print("\nVIOLATIONS:\n" + describe(fig), file=sys.stderr)
        return False
    return True


def _mcp_kills(kills: int, seed: int) -> bool:
    """The MCP server campaign; whether it saw no violation."""
    import mcp_kill_harness

    with tempfile.TemporaryDirectory(prefix="zuno-mcp-crash-") as tmp:
        fig = mcp_kill_harness.run_mcp_campaign(Path(tmp), kills, seed=seed)
    _print_table(f"MCP server kills, seed {seed}", mcp_kill_harness.figures_table(fig))
    if fig.violations:
        print("\nVIOLATIONS:\n" + mcp_kill_harness.describe(fig), file=sys.stderr)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="kill -9 a runtime, or MCP servers, at random")
    parser.add_argument(
        "--kills", type=int, default=None, help="rounds, one SIGKILL of the runtime each (1000)"
    )
    parser.add_argument(
        "--mcp-kills", type=int, default=None, help="SIGKILLs of MCP servers mid-call"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed of the kill schedule")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    kills = args.kills if args.kills is not None or args.mcp_kills is not None else 1000
    clean = True
    if kills:
        clean = _runtime_kills(kills, seed) and clean
    if args.mcp_kills:
        clean = _mcp_kills(args.mcp_kills, seed) and clean
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
