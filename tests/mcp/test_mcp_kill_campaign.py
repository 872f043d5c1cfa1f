"""MCP servers killed mid-call, a short campaign: the runtime never crashes.

The long run is ``bench/crash_injection.py --mcp-kills 200`` (figures in
``docs/crash_safety.md``); this one keeps the harness honest in the suite.
"""

from __future__ import annotations

from pathlib import Path

from mcp_kill_harness import describe, run_mcp_campaign  # pyright: ignore[reportMissingImports]


def test_killing_stdio_and_http_servers_mid_call_never_crashes_the_runtime(
    tmp_path: Path,
) -> None:
    fig = run_mcp_campaign(tmp_path, 6, seed=20261203)
    assert fig.violations == [], describe(fig)
    assert fig.kills == 6 and fig.stdio_kills >= 1 and fig.http_kills >= 1
    # Kills landed while calls were in flight, and calls met servers already dead.
    assert fig.landed_mid_call >= 1 and fig.blocked_unavailable >= 1
    assert fig.builtin_ok > 0 and fig.runtime_crashes == 0
