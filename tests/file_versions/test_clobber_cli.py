"""Edits that cannot clobber, through the real ``zuno`` command (a process per call).

Each ``zuno call`` is its own process; the calls of one workspace join its
session of direct calls, so what a call read is known to the next through the
store alone. The tests judge by the bytes on disk and the stored call rows.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ZUNO = str(Path(sys.executable).with_name("zuno"))


class Cli:
    """A workspace, a store file, and ``zuno`` run in it as a user would."""

    def __init__(self, root: Path) -> None:
        self.ws = root / "ws"
        self.ws.mkdir()
        self.db = root / "cli.db"
        self.env = {**os.environ, "ZUNO_DB": str(self.db)}

    def zuno(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ZUNO, *args],
            cwd=self.ws,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def call(self, tool: str, arguments: dict[str, object], *extra: str) -> dict[str, object]:
        proc = self.zuno("call", tool, json.dumps(arguments), "--json", *extra)
        assert proc.stdout.strip(), proc.stderr
        result: dict[str, object] = json.loads(proc.stdout)
        # The exit status says the same as the outcome.
        assert (proc.returncode == 0) == (result["outcome"] == "ok"), (proc, result)
        return result

    def outcomes(self, tool: str) -> list[str]:
        with sqlite3.connect(self.db) as db:
            rows = db.execute(
                "SELECT outcome FROM calls WHERE tool = ? ORDER BY started_at", (tool,)
            ).fetchall()
        return [str(r[0]) for r in rows]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def test_a_write_over_a_file_changed_since_it_was_read_is_refused(cli: Cli) -> None:
    target = cli.ws / "notes.txt"
    target.write_text("first\n")
    assert cli.call("read", {"path": "notes.txt"})["outcome"] == "ok"
    target.write_text("a person's edit\n")  # outside Zuno, after the read

    refused = cli.call("write", {"path": "notes.txt", "content": "the model's\n"}, "--yes")

    assert refused["outcome"] == "error"
    assert target.read_text() == "a person's edit\n"
    message = str(refused["result"])
    assert "notes.txt changed since this session last read it" in message
    assert "Read it again" in message
    assert cli.outcomes("write") == ["error"]

    # Read again: now the write goes through.
    assert cli.call("read", {"path": "notes.txt"})["outcome"] == "ok"
    done = cli.call("write", {"path": "notes.txt", "content": "the model's\n"}, "--yes")
    assert done["outcome"] == "ok", done
    assert target.read_text() == "the model's\n"


def test_a_person_replaces_an_unread_file_and_creates_a_new_one(cli: Cli) -> None:
    # `zuno call` is typed by a person, who sees the file themselves: no read is asked for.
    existing = cli.ws / "kept.txt"
    existing.write_text("keep me\n")

    created = cli.call("write", {"path": "sub/new.txt", "content": "hello\n"}, "--yes")
    replaced = cli.call("write", {"path": "kept.txt", "content": "replaced\n"}, "--yes")

    assert replaced["outcome"] == "ok", replaced
    assert existing.read_text() == "replaced\n"
    assert created["outcome"] == "ok", created
    assert (cli.ws / "sub" / "new.txt").read_text() == "hello\n"


def test_a_persons_batch_deletes_an_unread_file(cli: Cli) -> None:
    (cli.ws / "old.txt").write_text("old\n")
    steps = cli.ws.parent / "steps.json"
    patch = "*** Begin Patch\n*** Delete File: old.txt\n*** End Patch\n"
    steps.write_text(json.dumps([{"tool": "apply_patch", "args": {"patch": patch}}]))

    proc = cli.zuno("batch", str(steps), "--yes", "--json")

    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = json.loads(proc.stdout)
    assert result["outcome"] == "ok", result
    assert not (cli.ws / "old.txt").exists()
