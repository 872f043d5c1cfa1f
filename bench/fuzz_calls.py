"""Fuzz run: thousands of hostile calls (arbitrary Unicode, lone surrogates, raw junk).

Run: ``.venv/bin/python bench/fuzz_calls.py [--calls 5000] [--cli 100] [--seed N]``

Steps drawn by hypothesis go through ``Runtime.dispatch`` until at least
``--calls`` calls were made, then ``--cli`` runs of ``zuno call`` /
``zuno batch`` in subprocesses (undecodable bytes on the command line and in
batch files included). Every tool of the default surface plus the ``edit``
and ``execute`` slots is reached; ``shell`` and ``execute`` run for real in
the sandbox. Afterwards the store is reopened and must accept a call. The
harness is shared with the test suite: ``tests/core/fuzz_calls_harness.py``.

It prints a table of figures; the rows marked ``must be 0`` are violations,
and the script exits with status 1 when any is not 0 (the first ones are
printed on stderr).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "core"))

from fuzz_calls_harness import Campaign, figures_table

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="hostile calls through the API and the CLI")
    parser.add_argument("--calls", type=int, default=5000, help="calls through the API, at least")
    parser.add_argument("--cli", type=int, default=100, help="zuno call / batch runs")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    with tempfile.TemporaryDirectory(prefix="zuno-fuzz-") as tmp:
        campaign = Campaign(Path(tmp))
        batch = 0
        # Steps hold one to three calls: draw in rounds until enough calls were made.
        while campaign.figures.api_calls < args.calls:
            left = args.calls - campaign.figures.api_calls
            campaign.run_api(max(50, left // 2), seed=seed + batch)
            batch += 1
        if args.cli:
            campaign.run_cli(args.cli, seed=seed)
        campaign.check_store()
    fig = campaign.figures
    rows = figures_table(fig)
    width = max(len(label) for label, _ in rows)
    print(f"fuzz run, seed {seed}")
    print(f"| {'figure'.ljust(width)} | value |")
    print(f"| {'-' * width} | ----: |")
    for label, value in rows:
        print(f"| {label.ljust(width)} | {value} |")
    if fig.violations:
        print("\nVIOLATIONS:\n" + "\n\n".join(fig.violations[:20]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
