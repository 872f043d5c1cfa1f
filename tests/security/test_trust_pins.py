"""``zuno trust`` asks, and what it trusts covers the files the configuration runs.

A trusted ``zuno.json`` whose hook is ``./scripts/hook.sh`` runs whatever that
script holds. The attacks rewrite the script after the trust, from a sandboxed
command (bubblewrap and Landlock), from a file tool in accept-edits mode, and
from outside, and look for the marker the rewritten script would leave. All
through the real ``zuno`` command.
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


class Repo:
    """A user with their own config, and a repository whose zuno.json runs a script of its own."""

    def __init__(self, tmp_path: Path, *, mode: str = "permissive", kind: str = "bubblewrap"):
        self.home = tmp_path / "home"
        self.home.mkdir()
        (self.home / "zuno.json").write_text(
            json.dumps({"permission": {"mode": mode}, "sandbox": {"kind": kind}})
        )
        self.ws = tmp_path / "repo"
        (self.ws / "scripts").mkdir(parents=True)
        # In the workspace: the hooks of a workspace file always run confined.
        self.marks = self.ws / "marks"
        self.marks.mkdir()
        self.hook = self.ws / "scripts" / "hook.sh"
        self.hook.write_text(f"#!/bin/sh\ntouch {self.marks / 'honest'}\n")
        self.hook.chmod(0o755)
        (self.ws / "README").write_text("hello\n")
        config = {"hooks": {"before": [{"command": "./scripts/hook.sh", "fail": "open"}]}}
        (self.ws / "zuno.json").write_text(json.dumps(config))
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
            "ZUNO_CONFIG_HOME": str(self.home),
            "ZUNO_DB": str(tmp_path / "zuno.db"),
        }

    @property
    def evil(self) -> str:
        return f"#!/bin/sh\ntouch {self.marks / 'evil'}\n"

    def zuno(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ZUNO, *args],
            cwd=self.ws,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def marks_left(self) -> list[str]:
        found = sorted(p.name for p in self.marks.iterdir())
        for p in self.marks.iterdir():
            p.unlink()
        return found


def _trusted(repo: Repo) -> None:
    proc = repo.zuno("trust", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert "scripts/hook.sh" in proc.stdout and "pinned" in proc.stdout
    read = repo.zuno("call", "read", json.dumps({"path": "README"}))
    assert read.returncode == 0, read.stderr
    assert repo.marks_left() == ["honest"]


def test_a_changed_script_untrusts_the_config_and_names_the_file(tmp_path: Path) -> None:
    repo = Repo(tmp_path)
    _trusted(repo)
    repo.hook.write_text(repo.evil)  # changed by anything at all (a pull, an editor)
    proc = repo.zuno("call", "read", json.dumps({"path": "README"}))
    assert proc.returncode == 0, proc.stderr
    assert repo.marks_left() == []
    lines = [line for line in proc.stderr.splitlines() if "not trusted" in line]
    assert len(lines) == 1 and "scripts/hook.sh changed" in lines[0], proc.stderr
    # Trusting again pins the new content, and the script runs again.
    assert repo.zuno("trust", "--yes").returncode == 0
    repo.zuno("call", "read", json.dumps({"path": "README"}))
    assert repo.marks_left() == ["evil"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_sandboxed_command_cannot_rewrite_a_pinned_script(tmp_path: Path, kind: str) -> None:
    repo = Repo(tmp_path, kind=kind)
    _trusted(repo)
    before = repo.hook.read_bytes()
    attack = (
        f"(printf '{repo.evil}' > scripts/hook.sh) 2>/dev/null; "
        "(mv scripts scripts-old && mkdir scripts && cp scripts-old/hook.sh scripts/) 2>/dev/null; "
        "(rm -f scripts/hook.sh) 2>/dev/null; echo attempted"
    )
    proc = repo.zuno("call", "shell", json.dumps({"command": attack}), "--json")
    result = json.loads(proc.stdout)
    assert result["data"]["sandbox"] == kind, result
    assert "attempted" in result["result"], result
    assert repo.hook.read_bytes() == before
    assert not (repo.ws / "scripts-old").exists()
    repo.marks_left()
    repo.zuno("call", "read", json.dumps({"path": "README"}))
    assert repo.marks_left() == ["honest"]


def test_an_accept_edits_write_of_a_pinned_script_asks(tmp_path: Path) -> None:
    repo = Repo(tmp_path, mode="accept-edits")
    _trusted(repo)
    before = repo.hook.read_bytes()
    # One session: read the script (a write needs it), then overwrite it.
    steps = [
        {"tool": "read", "args": {"path": "scripts/hook.sh"}},
        {"tool": "write", "args": {"path": "scripts/hook.sh", "content": repo.evil}},
    ]
    (tmp_path / "steps.json").write_text(json.dumps(steps))
    proc = repo.zuno("batch", str(tmp_path / "steps.json"))
    assert repo.hook.read_bytes() == before, proc.stdout + proc.stderr
    assert "always" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    # An ordinary edit in the same mode still runs unasked.
    ok = repo.zuno("call", "write", json.dumps({"path": "notes.txt", "content": "n"}))
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_trust_without_a_terminal_needs_yes_and_show_trusts_nothing(tmp_path: Path) -> None:
    repo = Repo(tmp_path)
    refused = repo.zuno("trust")
    assert refused.returncode != 0
    assert "--yes" in refused.stderr and "--show" in refused.stderr, refused.stderr
    shown = repo.zuno("trust", "--show")
    assert shown.returncode == 0, shown.stderr
    assert "hooks" in shown.stdout and "scripts/hook.sh" in shown.stdout
    as_json: dict[str, Any] = json.loads(repo.zuno("trust", "--show", "--json").stdout)
    assert as_json["trusted"] is False and list(as_json["files"]) == ["scripts/hook.sh"]
    listed = repo.zuno("trust", "--list", "--json")
    assert json.loads(listed.stdout) == []
    repo.zuno("call", "read", json.dumps({"path": "README"}))
    assert repo.marks_left() == []


@pytest.mark.parametrize("answer", ["", "n", "y"])
def test_trust_on_a_terminal_lists_then_asks_default_no(tmp_path: Path, answer: str) -> None:
    import pty
    import select

    repo = Repo(tmp_path)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [ZUNO, "trust"],
        cwd=repo.ws,
        env={**repo.env, "TERM": "dumb"},
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    output = ""
    try:
        for _ in range(1200):  # bounded: at most 1200 waits of 0.1 s without output
            if "[y/N]" in output:
                break
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                output += os.read(master, 4096).decode("utf-8", "replace")
        assert "[y/N]" in output, output
        assert "hooks" in output and "scripts/hook.sh" in output
        assert not json.loads(repo.zuno("trust", "--list", "--json").stdout)  # not yet
        os.write(master, (answer + "\n").encode())
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    rows = json.loads(repo.zuno("trust", "--list", "--json").stdout)
    if answer == "y":
        assert code == 0 and [r["state"] for r in rows] == ["trusted"]
    else:
        assert code != 0 and rows == []


def test_the_allow_hint_names_the_file_where_the_rule_takes_effect(tmp_path: Path) -> None:
    repo = Repo(tmp_path, mode="strict")
    args = ("call", "write", json.dumps({"path": "notes.md", "content": "hi"}))

    def hint() -> str:
        proc = repo.zuno(*args)
        assert proc.returncode != 0 and not (repo.ws / "notes.md").exists()
        (line,) = [x for x in proc.stderr.splitlines() if "permission rule" in x]
        return line

    # Untrusted: an allow rule in the workspace's zuno.json would be ignored.
    untrusted = hint()
    assert str(repo.home / "zuno.json") in untrusted
    assert str(repo.ws / "zuno.json") not in untrusted
    assert repo.zuno("trust", "--yes").returncode == 0
    assert str(repo.ws / "zuno.json") in hint()
