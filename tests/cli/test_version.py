"""``zuno --version``: the installed version on stdout, status 0, served or not."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest


def _zuno() -> str:
    return str(Path(sys.executable).with_name("zuno"))


@pytest.mark.parametrize(
    "argv",
    [[_zuno(), "--version"], [sys.executable, "-m", "zuno", "--version"]],
    ids=["script", "module"],
)
def test_version_prints_the_installed_version(argv: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "ZUNO_SERVER": "off", "HOME": str(tmp_path)}
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"zuno {version('zuno')}\n"
    assert proc.stderr == ""
