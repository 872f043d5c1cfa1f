"""Arbitrary Unicode, lone surrogates and raw junk through the runtime and the CLI (issue 9).

A modest campaign (see ``fuzz_calls_harness``): a few hundred steps through
``Runtime.dispatch`` and a few ``zuno call`` / ``zuno batch`` runs. The full
run of 5,000+ calls is ``bench/fuzz_calls.py``; its figures are in
``docs/crash_safety.md``.
"""

from __future__ import annotations

from pathlib import Path

from fuzz_calls_harness import Campaign, figures_table


def test_hostile_unicode_never_crashes_hangs_or_changes_anything_when_blocked(
    tmp_path: Path,
) -> None:
    campaign = Campaign(tmp_path)
    campaign.run_api(400)
    campaign.run_cli(4)
    campaign.check_store()
    fig = campaign.figures
    table = "\n".join(f"{label}: {value}" for label, value in figures_table(fig))
    assert fig.violations == [], table + "\n\n" + "\n\n".join(fig.violations[:10])
    assert fig.api_calls >= 400 and fig.with_surrogates > 0, table
    assert fig.outcomes["blocked"] > 0 and fig.outcomes["ok"] > 0, table
