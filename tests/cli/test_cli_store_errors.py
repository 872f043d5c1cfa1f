"""A store that cannot be used, and input that is not text: one line, exit 2, no traceback.

Run as a person runs zuno: a real process, stdin not a terminal, no --yes.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from zuno.durability.store.schema import SCHEMA_VERSION

ZUNO = [sys.executable, "-m", "zuno"]


def zuno(
    workspace: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*ZUNO, *args],
        cwd=workspace,
        env={**os.environ, **(env or {})},
        input=stdin,
        capture_output=True,
        timeout=120,
    )
    return subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )


def one_line_exit_2(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


READ = ("call", "read", '{"path": "."}')
COMMANDS = [READ, ("sessions",), ("show", "ses_x"), ("tools",), ("memory", "list")]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_file_that_is_not_a_database(
    workspace: Path, tmp_path: Path, command: tuple[str]
) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database, just some text\n" * 200)
    proc = zuno(workspace, *command, "--db", str(junk))
    one_line_exit_2(proc, str(junk), "not a SQLite database", "--db")
    assert junk.read_bytes().startswith(b"this is not a database")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_folder_as_the_store(workspace: Path, tmp_path: Path, command: tuple[str]) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    proc = zuno(workspace, *command, "--db", str(folder))
    one_line_exit_2(proc, str(folder), "is a folder", "zuno.db")
    assert list(folder.iterdir()) == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_an_unreachable_postgres(workspace: Path, command: tuple[str]) -> None:
    dsn = f"postgresql://zuno:pw@127.0.0.1:{_free_port()}/zuno?connect_timeout=5"
    proc = zuno(workspace, *command, env={"ZUNO_DB": dsn})
    line = one_line_exit_2(proc, "cannot use PostgreSQL", "127.0.0.1")
    assert ":pw@" not in line


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_newer_store(workspace: Path, tmp_path: Path, command: tuple[str]) -> None:
    db = tmp_path / "new.db"
    assert zuno(workspace, *READ, "--db", str(db)).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    proc = zuno(workspace, *command, "--db", str(db))
    one_line_exit_2(proc, "schema version 99", f"supports version {SCHEMA_VERSION}")


def test_sessions_and_show_never_migrate_an_older_store(workspace: Path, tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    made = zuno(workspace, *READ, "--db", str(db), "--json")
    session = json.loads(made.stdout)["session_id"]
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE calls DROP COLUMN reason")
        conn.execute("CREATE INDEX calls_started ON calls (status)")
        conn.execute("DELETE FROM meta")
    layout = _layout(db)
    listed = zuno(workspace, "sessions", "--db", str(db), "--json")
    assert listed.returncode == 0, listed.stderr
    assert [s["session_id"] for s in json.loads(listed.stdout)] == [session]
    shown = zuno(workspace, "show", session, "--db", str(db))
    assert shown.returncode == 0 and "read" in shown.stdout, shown.stderr
    assert "upgrades it" in shown.stderr
    assert _layout(db) == layout


def test_memory_list_never_migrates_nor_creates_a_table(workspace: Path, tmp_path: Path) -> None:
    """Listing memories is a read: an older store keeps its layout, no table appears."""
    db = tmp_path / "old.db"
    zuno(workspace, *READ, "--db", str(db), "--json")
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE calls DROP COLUMN reason")
        conn.execute("DELETE FROM meta")
    layout = _layout(db)
    listed = zuno(workspace, "memory", "list", "--db", str(db), "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []
    assert _layout(db) == layout
    nowhere = tmp_path / "none" / "zuno.db"
    empty = zuno(workspace, "memory", "list", "--db", str(nowhere))
    assert empty.returncode == 0 and "No memories" in empty.stdout, empty.stderr
    assert not nowhere.parent.exists()


def _layout(db: Path) -> list[tuple[str, ...]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT type, name, COALESCE(sql, '') FROM sqlite_master").fetchall()
        meta = conn.execute("SELECT key, value FROM meta").fetchall()
    return sorted([*rows, *meta])


def test_sessions_on_a_new_location_creates_nothing(workspace: Path, tmp_path: Path) -> None:
    db = tmp_path / "none" / "zuno.db"
    proc = zuno(workspace, "sessions", "--db", str(db), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == []
    assert not db.parent.exists()


def test_a_batch_file_that_is_not_utf8(workspace: Path, tmp_path: Path) -> None:
    batch = tmp_path / "batch.json"
    batch.write_bytes(b'[{"tool": "read", "args": {"path": "caf\xe9"}}]')
    proc = zuno(workspace, "batch", str(batch), "--db", str(tmp_path / "s.db"))
    one_line_exit_2(proc, str(batch), "not UTF-8")
    from_stdin = zuno(
        workspace,
        "batch",
        "-",
        "--db",
        str(tmp_path / "s.db"),
        stdin=b'[{"tool": "read", "args": {"path": "\xff"}}]',
    )
    one_line_exit_2(from_stdin, "not UTF-8")


def test_arguments_that_are_not_utf8_are_a_blocked_call(workspace: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    from_stdin = zuno(
        workspace, "call", "read", "-", "--db", str(db), "--json", stdin=b'{"path": "\xff"}'
    )
    assert from_stdin.returncode == 1, from_stdin.stderr
    body = json.loads(from_stdin.stdout)
    assert (body["outcome"], body["block_kind"]) == ("blocked", "invalid_arguments")
    # Undecodable bytes on the command line (a tool name, arguments) likewise.
    proc = subprocess.run(
        [*ZUNO, "call", b"re\xffad", b'{"path": "\xfe"}', "--db", str(db), "--json"],
        cwd=workspace,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 1 and b"Traceback" not in proc.stderr, proc.stderr
    body = json.loads(proc.stdout)
    assert (body["outcome"], body["block_kind"]) == ("blocked", "unavailable")
    listed = zuno(workspace, "sessions", "--db", str(db), "--json")
    assert listed.returncode == 0
    # Both calls joined the workspace's one session of direct calls.
    assert [s["calls"] for s in json.loads(listed.stdout)] == [2]
