"""Zuno's own folders inside the workspace: a command or a file tool must not change them.

People run agents in ``~``, and keep their config folder in a dotfiles
repository they also work in. Then the user's ``zuno.json`` (hooks run outside
the sandbox), ``trust.json`` (which workspace files are honoured) and the data
folder (store, artifacts, checkpoint repositories) lie inside the writable
workspace. Each attack runs through the real ``zuno`` command, under real
bubblewrap and real Landlock, with the user's own configuration letting every
call run (permissive), so only the sandbox and the always-asked control paths
stand between the attack and the files. Judged on disk from outside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ZUNO = str(Path(sys.executable).with_name("zuno"))
KINDS = ["bubblewrap", "landlock"]

_DROPPED = ("ZUNO_CONFIG_HOME", "ZUNO_DB", "ZUNO_ARTIFACTS", "COLUMNS", "LINES")


def _tree(root: Path) -> dict[str, str]:
    """Every entry under root (links not followed): kind and content."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                found[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = p.read_bytes().hex()
    return found


class Home:
    """A user whose home folder is the workspace (config and data in the usual places)."""

    def __init__(self, tmp_path: Path, kind: str, *, mode: str = "permissive") -> None:
        self.home = tmp_path / "home"
        self.config = self.home / ".config" / "zuno"
        self.config.mkdir(parents=True)
        self.data = self.home / ".local" / "share" / "zuno"
        self.write_user_config({"permission": {"mode": mode}, "sandbox": {"kind": kind}})
        (self.config / "trust.json").write_text('{"folders": {}}\n')
        self.env = {
            **{
                k: v
                for k, v in os.environ.items()
                if k not in _DROPPED and not k.startswith("XDG_")
            },
            "HOME": str(self.home),
        }

    def write_user_config(self, data: dict[str, Any]) -> None:
        (self.config / "zuno.json").write_text(json.dumps(data))

    def zuno(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ZUNO, *args],
            cwd=cwd or self.home,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def shell(self, command: str, cwd: Path | None = None) -> dict[str, Any]:
        proc = self.zuno("call", "shell", json.dumps({"command": command}), "--json", cwd=cwd)
        assert proc.stdout, proc.stderr
        return json.loads(proc.stdout)


ATTACKS = {
    "rewrite the user's zuno.json": (
        'echo \'{"hooks": {"before": [{"command": "touch P"}]}}\' > .config/zuno/zuno.json'
    ),
    "trust a folder": 'echo \'{"folders": {"/x": "0"}}\' > .config/zuno/trust.json',
    "add a file to the config folder": "echo x > .config/zuno/new",
    "replace the config folder": "mv .config/zuno .config/old; mkdir .config/zuno && "
    "echo '{}' > .config/zuno/zuno.json",
    "move .config away": "mv .config .config-old; mkdir -p .config/zuno && "
    "echo '{}' > .config/zuno/zuno.json",
    "move .local away": "mv .local .local-old; mkdir -p .local/share/zuno",
    "write in the artifacts folder": "echo x > .local/share/zuno/zuno-artifacts/planted",
    "poison a checkpoint repository": "mkdir -p .local/share/zuno/zuno-artifacts/checkpoints/x"
    " && echo x > .local/share/zuno/zuno-artifacts/checkpoints/x/config",
    "write the store": "echo x >> .local/share/zuno/zuno.db",
}


@pytest.mark.parametrize("kind", KINDS)
def test_workspace_home_keeps_zunos_folders_out_of_reach(tmp_path: Path, kind: str) -> None:
    user = Home(tmp_path, kind)
    first = user.shell("echo ready")  # makes the store and its artifacts folder
    assert first["data"]["sandbox"] == kind, first
    config_before = _tree(user.config)
    data_before = set(_tree(user.data))
    script = "; ".join(f"({attack}) 2>/dev/null" for attack in ATTACKS.values())
    result = user.shell(script + "; echo attempted; echo ok > mine.txt")
    assert "attempted" in result["result"], result
    # The rest of the home folder is still the workspace, writable as ever.
    assert (user.home / "mine.txt").read_text() == "ok\n"
    assert _tree(user.config) == config_before
    for name in (".config-old", ".local-old", ".config/old"):
        assert not (user.home / name).exists(), name
    planted = set(_tree(user.data)) - data_before
    assert not {p for p in planted if "planted" in p or "checkpoints/x" in p}, planted


def test_a_workspace_holding_zunos_folders_is_named_at_start(tmp_path: Path) -> None:
    user = Home(tmp_path, "bubblewrap")
    proc = user.zuno("call", "read", json.dumps({"path": ".config/zuno/trust.json"}))
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "Zuno's own" in line]
    assert len(lines) == 1, proc.stderr
    assert "config folder" in lines[0] and str(user.config) in lines[0]
    # A workspace beside (not around) those folders hears nothing about them.
    (user.home / "project").mkdir()
    elsewhere = user.zuno("call", "read", json.dumps({"path": "."}), cwd=user.home / "project")
    assert "Zuno's own" not in elsewhere.stderr


@pytest.mark.parametrize("mode", ["permissive", "accept-edits"])
def test_file_tools_writing_zunos_folders_always_ask(tmp_path: Path, mode: str) -> None:
    user = Home(tmp_path, "bubblewrap", mode=mode)
    (user.config / "trust.json").unlink()
    user.zuno("call", "read", json.dumps({"path": "."}))  # makes the store and artifacts
    before = _tree(user.config), set(_tree(user.data / "zuno-artifacts"))
    # A new trust.json that trusts whatever zuno.json the home folder holds.
    trusting = json.dumps({"folders": {str(user.home): "0" * 64}})
    for args in [
        {"path": ".config/zuno/trust.json", "content": trusting},
        {"path": ".local/share/zuno/zuno-artifacts/checkpoints/planted", "content": "x"},
    ]:
        proc = user.zuno("call", "write", json.dumps(args))
        assert proc.returncode != 0, (args, proc.stdout)
        assert "Zuno's own" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert (_tree(user.config), set(_tree(user.data / "zuno-artifacts"))) == before
    # An ordinary file of the same workspace is written as the mode says.
    ok = user.zuno("call", "write", json.dumps({"path": "notes.txt", "content": "n"}))
    assert ok.returncode == 0, ok.stdout + ok.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_a_config_folder_linked_into_the_workspace_stays_read_only(
    tmp_path: Path, kind: str
) -> None:
    user = Home(tmp_path, kind)
    dotfiles = user.home / "dotfiles"
    dotfiles.mkdir()
    # ~/.config/zuno is a link into the dotfiles repository, which is the workspace.
    user.config.rename(dotfiles / "zuno")
    user.config.symlink_to(dotfiles / "zuno")
    before = _tree(dotfiles / "zuno")
    attacks = [
        "echo '{}' > zuno/zuno.json",
        "echo '{\"folders\": {}}' > zuno/trust.json",
        "mv zuno zuno-old; mkdir zuno && echo '{}' > zuno/zuno.json",
        "rm -rf zuno",
    ]
    script = "; ".join(f"({a}) 2>/dev/null" for a in attacks)
    result = user.shell(script + "; echo attempted", cwd=dotfiles)
    assert result["data"]["sandbox"] == kind, result
    assert "attempted" in result["result"], result
    assert _tree(dotfiles / "zuno") == before
    assert not (dotfiles / "zuno-old").exists()
