"""``zuno diff`` and ``zuno undo`` run as a user runs them: real processes, store, git, shell.

No --yes on undo and stdin is not a terminal: the person typing ``zuno undo``
is the approval. Every check reads the disk or the store.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ZUNO = [sys.executable, "-m", "zuno"]


class Zuno:
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

    def ok(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = self.run(*args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json").stdout)

    def shell(self, command: str) -> str:
        """Run a shell call (approved with --yes); its call id."""
        result = self.json("call", "shell", json.dumps({"command": command}), "--yes")
        assert result["outcome"] == "ok", result
        return str(result["call_id"])


@pytest.fixture
def zuno(workspace: Path, tmp_path: Path) -> Zuno:
    (workspace / "notes.txt").write_text("alpha\n")
    (workspace / "tool.sh").write_text("#!/bin/sh\necho hi\n")
    (workspace / "tool.sh").chmod(0o755)
    return Zuno(workspace, tmp_path / "cli.db")


def test_zuno_diff_and_undo_of_shell_effects_and_undo_of_the_undo(
    zuno: Zuno, workspace: Path
) -> None:
    # The workspace is the user's repository, with a commit and a staged file.
    git = ["git", "-C", str(workspace), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "notes.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "notes"], check=True)
    subprocess.run([*git, "add", "tool.sh"], check=True)
    index = (workspace / ".git" / "index").read_bytes()
    head = (workspace / ".git" / "HEAD").read_bytes()
    digest = _folder_digest(workspace / ".git")

    first = zuno.shell(
        "echo beta >> notes.txt; chmod -x tool.sh; mkdir out; echo built > out/app; "
        "ln -s notes.txt n"
    )
    second = zuno.shell("echo gamma >> notes.txt; rm out/app")
    changed = {p.name: p.read_bytes() for p in workspace.iterdir() if p.is_file()}

    data = zuno.json("diff", first)
    assert {f["path"]: f["status"] for f in data["files"]} == {
        "notes.txt": "modified",
        "tool.sh": "mode",
        "out/app": "added",
        "n": "added",
    }
    assert data["after_call"] == second  # compared with the checkpoint before the next call
    plain = zuno.ok("diff", second)
    assert "+gamma" in plain.stdout and "out/app" in plain.stdout
    assert "\x1b[" not in plain.stdout  # not a terminal: no colour

    refused = zuno.run("undo", first)  # notes.txt changed again after it
    assert refused.returncode == 1 and "notes.txt" in refused.stdout
    # The way out is told in the command's own options, not the tool's arguments.
    assert f"zuno undo --to {first}" in refused.stdout and f"zuno undo {first} --force" in (
        refused.stdout
    )
    assert 'scope "to"' not in refused.stdout
    assert (workspace / "notes.txt").read_text() == "alpha\nbeta\ngamma\n"

    zuno.ok("undo")  # the last side-effecting call: the second shell
    assert (workspace / "notes.txt").read_text() == "alpha\nbeta\n"
    assert (workspace / "out" / "app").read_text() == "built\n"
    zuno.ok("undo")  # the last one is now that undo: undo it
    assert {p.name: p.read_bytes() for p in workspace.iterdir() if p.is_file()} == changed
    assert not (workspace / "out").exists()  # the folder it emptied is gone again
    assert os.readlink(workspace / "n") == "notes.txt"

    # Both undos are calls of their own, each with its checkpoint.
    (session,) = zuno.json("sessions")
    calls = zuno.json("show", session["session_id"])["calls"]
    undos = [c for c in calls if c["tool"] == "undo"]
    assert [c["outcome"] for c in undos] == ["blocked", "ok", "ok"]
    assert all(c["snapshot"] and c["effect"] == "side_effecting" for c in undos)
    assert all(c["replay"] == "never" and c["concurrency"] == "exclusive" for c in undos)

    # The user's repository: not one byte changed.
    assert (workspace / ".git" / "index").read_bytes() == index
    assert (workspace / ".git" / "HEAD").read_bytes() == head
    assert _folder_digest(workspace / ".git") == digest


def test_zuno_undo_to_brings_the_workspace_back_before_that_call(
    zuno: Zuno, workspace: Path
) -> None:
    first = zuno.shell("echo beta >> notes.txt")
    zuno.shell("echo gamma >> notes.txt; echo y > y.txt; chmod -x tool.sh")
    zuno.ok("undo", "--to", first)
    assert sorted(p.name for p in workspace.iterdir()) == ["notes.txt", "tool.sh"]
    assert (workspace / "notes.txt").read_text() == "alpha\n"
    assert os.access(workspace / "tool.sh", os.X_OK)

    unknown = zuno.run("undo", "call_nosuch")
    assert unknown.returncode == 2 and "no call 'call_nosuch'" in unknown.stderr


def _folder_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            p = Path(folder, name)
            digest.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    return digest.hexdigest()


def test_diff_of_a_todo_update_says_it_changes_no_files(zuno: Zuno) -> None:
    todos = {"todos": [{"content": "write the docs"}]}
    done = zuno.json("call", "todo_update", json.dumps(todos), "--yes")
    assert done["outcome"] == "ok", done
    for command in ("diff", "undo"):
        proc = zuno.run(command, str(done["call_id"]))
        assert proc.returncode != 0
        said = proc.stderr + proc.stdout
        assert "not workspace files" in said and "checkpoints were off" not in said, said
        assert "Traceback" not in said
