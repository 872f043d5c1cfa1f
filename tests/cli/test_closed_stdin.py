"""``-`` with standard input closed (``<&-``): one clear line and exit 2, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ZUNO = Path(sys.executable).parent / "zuno"


@pytest.mark.parametrize("command", [["call", "read", "-"], ["batch", "-"]])
def test_a_closed_stdin_is_said_plainly(command: list[str], workspace: Path) -> None:
    argv = " ".join([str(ZUNO), *command])
    done = subprocess.run(
        ["sh", "-c", f"exec {argv} <&-"], cwd=workspace, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert "standard input is closed" in done.stderr
    assert "Traceback" not in done.stderr
