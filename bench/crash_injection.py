"""Crash injection: 1,000 ``kill -9`` of a runtime in the middle of side-effecting sessions.

Run: ``.venv/bin/python bench/crash_injection.py [--kills 1000] [--seed N]``

Each round forks a child that resumes a session and keeps dispatching
``append`` calls (each appends a unique id to a file) beside read-only
``peek`` calls; the child is killed with SIGKILL at a random instant (a fifth
of the time it kills itself inside an ``append``, just before or just after
the effect). The parent then checks the store against the files, settles the
dead child's calls as a resume does and checks the recovery notice. The
harness is shared with the test suite: ``tests/recovery/crash_harness.py``.

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

from crash_harness import describe, figures_table, run_campaign

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="kill -9 a runtime at random points")
    parser.add_argument("--kills", type=int, default=1000, help="rounds, one SIGKILL each")
    parser.add_argument("--seed", type=int, default=None, help="seed of the kill schedule")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    with tempfile.TemporaryDirectory(prefix="zuno-crash-") as tmp:
        fig = run_campaign(Path(tmp), args.kills, seed=seed)
    rows = figures_table(fig)
    width = max(len(label) for label, _ in rows)
    print(f"crash injection, seed {seed}")
    print(f"| {'figure'.ljust(width)} | value |")
    print(f"| {'-' * width} | ----: |")
    for label, value in rows:
        print(f"| {label.ljust(width)} | {value} |")
    if fig.violations:
        print("\nVIOLATIONS:\n" + describe(fig), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
