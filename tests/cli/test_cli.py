"""The zuno command, run as a user runs it: a real process, a real store file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from zuno.config.trust import trust

ZUNO = [sys.executable, "-m", "zuno"]


class Zuno:
    def __init__(self, workspace: Path, db: Path) -> None:
        self.workspace = workspace
        self.env = {**os.environ, "ZUNO_DB": str(db)}

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*ZUNO, *args],
            cwd=self.workspace,
            env=self.env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def json(self, *args: str, code: int = 0) -> Any:
        proc = self.run(*args, "--json")
        assert proc.returncode == code, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture
def zuno(workspace: Path, tmp_path: Path) -> Zuno:
    (workspace / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    return Zuno(workspace, tmp_path / "cli.db")


def test_tools_lists_declarations(zuno: Zuno) -> None:
    rows = {row["name"]: row for row in zuno.json("tools")["tools"]}
    assert rows["read"]["effect"] == "read_only" and rows["read"]["replay"] == "safe"
    assert rows["write"]["effect"] == "side_effecting"
    assert rows["write"]["concurrency"] == "exclusive"
    assert "edit" not in rows  # a registered slot, not in the default surface


def test_tools_text_is_never_cut_when_piped(zuno: Zuno) -> None:
    lines = zuno.run("tools").stdout.splitlines()
    by_name = {line.split()[0]: line.split() for line in lines[2:] if line.strip()}
    assert by_name["apply_patch"][1:5] == ["default", "side_effecting", "never", "exclusive"]
    assert by_name["shell"][2] == "side_effecting*"  # mixed, explained in the note
    assert by_name["question"][2] == "user_mediated"
    assert lines[-2].startswith("* mixed:")
    assert lines[-1].startswith("not offered: web_search (")  # no search backend here


def test_call_read_json_shape(zuno: Zuno) -> None:
    body = zuno.json("call", "read", '{"path": "notes.txt"}')
    assert {
        "call_id",
        "session_id",
        "outcome",
        "block_kind",
        "effect",
        "replay",
        "concurrency",
        "result",
    } <= body.keys()
    assert body["outcome"] == "ok" and "2\tbeta" in body["result"]


def test_write_needs_approval_without_a_terminal(zuno: Zuno) -> None:
    body = zuno.json("call", "write", '{"path": "new.txt", "content": "x"}', code=1)
    assert (body["outcome"], body["block_kind"]) == ("blocked", "denied")
    assert not (zuno.workspace / "new.txt").exists()
    body = zuno.json("call", "write", '{"path": "new.txt", "content": "x"}', "--yes")
    assert body["outcome"] == "ok" and (zuno.workspace / "new.txt").read_text() == "x"


def test_plain_text_arguments_get_an_example_of_the_json_form(zuno: Zuno) -> None:
    proc = zuno.run("call", "read", "README.md")
    assert proc.returncode == 1
    assert 'zuno call read \'{"path": "README.md"}\'' in proc.stderr, proc.stderr
    proc = zuno.run("call", "write", "notes")
    assert 'zuno call write \'{"path": "...", "content": "..."}\'' in proc.stderr
    proc = zuno.run("call", "read", '{"path": 3}')  # JSON, of the wrong shape: no example
    assert "such as" not in proc.stderr and "Expected arguments" in proc.stdout


def test_malformed_arguments_are_blocked_not_crashed(zuno: Zuno) -> None:
    body = zuno.json("call", "read", '{"path": ', code=1)
    assert body["block_kind"] == "invalid_arguments" and "not valid JSON" in body["result"]
    body = zuno.json("call", "teleport", "{}", code=1)
    assert body["block_kind"] == "unavailable"


def test_batch_takes_mcp_style_arguments_and_refuses_unknown_keys(
    zuno: Zuno, tmp_path: Path
) -> None:
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps([{"tool": "read", "arguments": {"path": "notes.txt"}}]))
    (result,) = zuno.json("batch", str(batch))
    assert result["outcome"] == "ok" and "beta" in result["result"]

    batch.write_text(json.dumps([{"tool": "read", "argz": {"path": "notes.txt"}}]))
    proc = zuno.run("batch", str(batch))
    assert proc.returncode != 0
    assert "entry 1 has unknown key(s) 'argz'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_batch_then_show_and_sessions(zuno: Zuno, tmp_path: Path) -> None:
    batch = tmp_path / "batch.json"
    batch.write_text(
        json.dumps(
            [
                {"tool": "read", "args": {"path": "notes.txt"}},
                {"tool": "read", "args": {"path": "missing.txt"}},
                {"tool": "write", "args": {"path": "out.txt", "content": "hi\n"}},
            ]
        )
    )
    results = zuno.json("batch", str(batch), "--yes", code=1)
    assert [r["tool"] for r in results] == ["read", "read", "write"]
    assert [r["outcome"] for r in results] == ["ok", "error", "ok"]
    session = results[0]["session_id"]

    shown = zuno.json("show", session)
    calls = shown["calls"]
    assert [c["index"] for c in calls] == [0, 1, 2]
    for c in calls:
        assert {
            "call_id",
            "index",
            "tool",
            "effect",
            "replay",
            "concurrency",
            "outcome",
            "block_kind",
            "attempt",
            "started_at",
            "finished_at",
        } <= c.keys()
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds[0] == "dispatch.started" and kinds[-1] == "dispatch.finished"
    assert [e["seq"] for e in shown["events"]] == sorted(e["seq"] for e in shown["events"])

    # Appending to the same session, then listing.
    zuno.json("call", "read", '{"path": "out.txt"}', "--session", session)
    listed = zuno.json("sessions")
    assert listed[0]["session_id"] == session or any(s["session_id"] == session for s in listed)
    mine = next(s for s in listed if s["session_id"] == session)
    assert mine["calls"] == 4 and mine["agent"] == "build"
    assert {"session_id", "created_at", "agent", "calls"} <= mine.keys()
    created = [s["created_at"] for s in listed]
    assert created == sorted(created, reverse=True)

    text = zuno.run("show", session[:-4])
    assert text.returncode == 0 and "write" in text.stdout


def test_bad_config_is_one_clear_line(zuno: Zuno) -> None:
    (zuno.workspace / "zuno.json").write_text('{"concurrency": {"tool_calls": 100}}')
    proc = zuno.run("call", "read", '{"path": "notes.txt"}')
    assert proc.returncode == 2
    assert "concurrency.tool_calls" in proc.stderr and "1..=64" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_session_is_a_clear_error(zuno: Zuno) -> None:
    proc = zuno.run("call", "read", '{"path": "notes.txt"}', "--session", "ses_nope")
    assert proc.returncode == 2 and "zuno sessions" in proc.stderr


def test_config_schema_and_doctor(zuno: Zuno) -> None:
    schema = json.loads(zuno.run("config", "schema").stdout)
    assert "concurrency" in schema["properties"]
    report = zuno.json("doctor")
    assert report["rg"]["version"].startswith("14.") and report["ok"] is True
    assert report["store"] == zuno.env["ZUNO_DB"]
    text = zuno.run("doctor").stdout.splitlines()
    assert text[0].split()[:2] == ["rg:", report["rg"]["version"]]
    assert any(line.startswith("sandbox:") for line in text) and text[-1] == "ok"
    (zuno.workspace / "zuno.json").write_text('{"sandbox": {"kind": "nonsense"}}')
    broken = zuno.run("doctor")
    assert broken.returncode == 1 and "sandbox.kind" in broken.stdout
    assert broken.stdout.rstrip().endswith("NOT OK: see the lines above")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_cancels_the_call_settles_it_and_kills_its_command(
    zuno: Zuno, signum: int
) -> None:
    # Landlock: no bubblewrap --die-with-parent to clean up after a process that just died.
    (zuno.workspace / "zuno.json").write_text(
        json.dumps({"sandbox": {"kind": "landlock", "mode": "full-access"}})
    )
    trust(zuno.workspace)  # sandbox.kind and full-access count from a trusted folder only
    marker = f"zuno-stop-{os.getpid()}-{signum}"
    command = f"echo start >> log.txt; exec -a {marker} sleep 60"
    proc = subprocess.Popen(
        [*ZUNO, "call", "shell", json.dumps({"command": command}), "--yes", "--json"],
        cwd=zuno.workspace,
        env=zuno.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = zuno.workspace / "log.txt"
    for _ in range(600):  # the command has started once it wrote its line
        if log.exists() and _running(marker):
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the command never started")
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, stderr
    assert "interrupted" in stderr
    assert not _running(marker)  # its process tree was killed before zuno exited
    (session,) = zuno.json("sessions")
    calls = zuno.json("show", session["session_id"])["calls"]
    assert [c["outcome"] for c in calls] == ["uncertain"]  # settled by this process


def _running(marker: str) -> bool:
    for entry in Path("/proc").iterdir():
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False
