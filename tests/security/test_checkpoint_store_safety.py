"""The checkpoint shadow store runs no code, keeps no denied file, and is private.

Everything goes through the real CLI (``zuno call shell``, ``zuno diff``) with a
real store and git: a poisoned shadow repository (its config asking for an
fsmonitor and pager, hooks that write a marker) runs nothing and is recreated;
a deny rule keeps a secret's bytes out of every object and out of ``zuno diff``;
the store's folders and files are readable by the user alone.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

ZUNO = [sys.executable, "-m", "zuno"]
SECRET = b"hunter2-correct-horse-battery"


class Cli:
    def __init__(self, workspace: Path, db: Path) -> None:
        self.workspace = workspace
        self.env = {**os.environ, "ZUNO_DB": str(db)}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*ZUNO, *args],
            cwd=self.workspace,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def json(self, *args: str) -> Any:
        proc = self.run(*args, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    def shell(self, command: str) -> str:
        result = self.json("call", "shell", json.dumps({"command": command}), "--yes")
        assert result["outcome"] == "ok", result
        return str(result["call_id"])


@pytest.fixture
def cli(workspace: Path, tmp_path: Path) -> Cli:
    (workspace / "notes.txt").write_text("alpha\n")
    return Cli(workspace, tmp_path / "data" / "cli.db")


def shadow_store(tmp_path: Path) -> Path:
    (found,) = list((tmp_path / "data").rglob("*.git"))
    return found


def test_a_poisoned_shadow_repository_runs_nothing_and_is_recreated(
    cli: Cli, workspace: Path, tmp_path: Path
) -> None:
    first = cli.shell("echo beta >> notes.txt")
    git_dir = shadow_store(tmp_path)
    marker = tmp_path / "marker"
    hook = f"#!/bin/sh\necho ran >> {marker}\n"
    with (git_dir / "config").open("a") as config:
        config.write(
            f'[core]\n\tfsmonitor = "echo ran >> {marker}; false"\n'
            f"\thooksPath = {git_dir / 'hooks'}\n\tpager = echo ran >> {marker}\n"
            f"[diff]\n\texternal = {git_dir / 'hooks' / 'post-index-change'}\n"
        )
    hooks = git_dir / "hooks"
    hooks.mkdir(exist_ok=True)
    for name in ("post-index-change", "pre-commit", "post-commit", "reference-transaction"):
        (hooks / name).write_text(hook)
        (hooks / name).chmod(0o755)

    second = cli.shell("echo gamma >> notes.txt")
    cli.json("diff", second)
    assert not marker.exists()
    # The poisoned repository was replaced by a clean one: the new chain works.
    assert 'fsmonitor = "echo' not in (git_dir / "config").read_text()
    third = cli.shell("echo delta >> notes.txt")
    files = cli.json("diff", third)["files"]
    assert [f["path"] for f in files] == ["notes.txt"]
    assert not marker.exists()
    # The chain before the poisoning went with the poisoned repository: said plainly.
    lost = cli.run("diff", first)
    assert lost.returncode != 0 and "Traceback" not in lost.stderr


def test_denied_files_never_reach_the_store_nor_the_diff(
    cli: Cli, workspace: Path, tmp_path: Path
) -> None:
    (workspace / "zuno.json").write_text(
        # A deny rule narrows: the workspace's file is honoured untrusted.
        json.dumps(
            {"permission": {"rules": [{"tool": "*", "pattern": "secrets/**", "action": "deny"}]}}
        )
    )
    secrets = workspace / "secrets"
    secrets.mkdir(mode=0o700)
    (secrets / "key.pem").write_bytes(SECRET + b"\n")
    (secrets / "key.pem").chmod(0o600)
    first = cli.shell("echo beta >> notes.txt")
    second = cli.shell(
        f"printf '%s-rotated\\n' {SECRET.decode()} > secrets/key.pem; echo new > secrets/other"
    )
    cli.shell("echo gamma >> notes.txt")

    for call in (first, second):
        shown = cli.run("diff", call)
        assert shown.returncode == 0, shown.stderr
        assert SECRET.decode() not in shown.stdout and "secrets/" not in shown.stdout
        data = cli.json("diff", call)
        assert all(not f["path"].startswith("secrets") for f in data["files"])
        assert SECRET.decode() not in data["patch"]

    git_dir = shadow_store(tmp_path)
    for obj in (git_dir / "objects").rglob("*"):
        if obj.is_file() and len(obj.parent.name) == 2:
            assert SECRET not in zlib.decompress(obj.read_bytes()), obj


def test_the_shadow_store_is_private(cli: Cli, tmp_path: Path) -> None:
    cli.shell("echo beta >> notes.txt")
    cli.shell("echo gamma >> notes.txt; echo x > new.txt")
    git_dir = shadow_store(tmp_path)
    checked = 0
    for path in [git_dir.parent, git_dir, *git_dir.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
        checked += 1
    assert checked > 10
