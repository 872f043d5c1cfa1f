"""``zuno tools`` and ``zuno --help`` cold: served from the startup cache, never stale.

Each run is the real ``zuno`` launcher in a fresh interpreter, the command
server off (as the first command after an install). Whether an answer came
from the cache is told by what the process imported (``-X importtime`` lists
every import on standard error): a served answer imports neither typer nor
pydantic. Not timed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zuno.cli.startup_cache import cache_key


class Launcher:
    def __init__(self, workspace: Path, tmp: Path) -> None:
        self.workspace = workspace
        self.env = {
            **os.environ,
            "ZUNO_SERVER": "off",
            "ZUNO_CACHE_HOME": str(tmp / "cache"),
            "ZUNO_DB": str(tmp / "data" / "z.db"),
        }

    def run(self, *args: str, **env: str) -> tuple[str, set[str], int]:
        """Standard output, the top-level packages imported, and the exit status."""
        proc = subprocess.run(
            [
                sys.executable,
                "-X",
                "importtime",
                "-c",
                "from zuno.cli.launcher import main; main()",
                *args,
            ],
            cwd=self.workspace,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        imported = {
            line.split("|")[-1].strip().split(".")[0]
            for line in proc.stderr.splitlines()
            if line.startswith("import time:")
        }
        return proc.stdout, imported, proc.returncode


@pytest.fixture
def zuno(workspace: Path, tmp_path: Path) -> Launcher:
    return Launcher(workspace, tmp_path)


def test_the_tool_table_is_served_from_the_cache_until_the_config_changes(
    zuno: Launcher, workspace: Path
) -> None:
    first, imported, status = zuno.run("tools")
    assert status == 0 and "typer" in imported and "write" in first
    second, imported, status = zuno.run("tools")
    assert status == 0 and second == first
    assert "typer" not in imported and "pydantic" not in imported  # the cache answered

    # A tool switched off in the workspace's zuno.json: not served stale.
    (workspace / "zuno.json").write_text(json.dumps({"tools": {"write": False}}))
    third, imported, _ = zuno.run("tools")
    assert "typer" in imported and third != first
    assert zuno.run("tools")[0] == third

    # Another environment (a variable that steers Zuno) or another folder: computed again.
    _, imported, _ = zuno.run("tools", ZUNO_SANDBOX="none")
    assert "typer" in imported
    other = workspace / "sub"
    other.mkdir()
    zuno.workspace = other
    _, imported, _ = zuno.run("tools")
    assert "typer" in imported


def test_help_is_served_and_failures_or_warnings_are_never_cached(
    zuno: Launcher, workspace: Path
) -> None:
    text, _, status = zuno.run("--help")
    assert status == 0 and "Usage" in text
    again, imported, _ = zuno.run("--help")
    assert again == text and "typer" not in imported

    # A workspace config that cannot be read: an error each time, never replayed as output.
    (workspace / "zuno.json").write_text("{not json")
    _, imported, status = zuno.run("tools")
    assert status != 0
    _, imported, status = zuno.run("tools")
    assert status != 0 and "typer" in imported

    # MCP servers in the config: their tools are live, the table is never cached.
    server = {"command": sys.executable, "args": ["-c", "pass"]}
    (workspace / "zuno.json").write_text(json.dumps({"mcp": {"servers": {"x": server}}}))
    zuno.run("tools")
    _, imported, _ = zuno.run("tools")
    assert "typer" in imported

    # Off by switch.
    (workspace / "zuno.json").unlink()
    zuno.run("tools")
    _, imported, _ = zuno.run("tools", ZUNO_STARTUP_CACHE="off")
    assert "typer" in imported


def test_the_key_follows_the_package_files(tmp_path: Path) -> None:
    package = tmp_path / "zuno"
    package.mkdir()
    module = package / "cli.py"
    module.write_text("A = 1\n")
    before = cache_key(["zuno", "tools"], package=str(package))
    assert cache_key(["zuno", "tools"], package=str(package)) == before
    module.write_text("A = 2\n")  # same size, new content: its times and stat change
    os.utime(module, ns=(1, 1))
    assert cache_key(["zuno", "tools"], package=str(package)) != before
    (package / "new.py").write_text("")
    assert cache_key(["zuno", "tools"], package=str(package)) != before
