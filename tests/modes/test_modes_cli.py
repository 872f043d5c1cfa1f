"""Permission modes through the real CLI: ``zuno call``, ``batch``, ``run``, ``resume``,
``submit`` and ``worker`` as separate processes, stdin not a terminal and no ``--yes``.

What counts is the workspace on disk and the rows ``zuno show --json`` reads back.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))

from fake_api import FakeModelServer, Reply

ZUNO = str(Path(sys.executable).with_name("zuno"))
MODEL = "openai:fake-model"


class Cli:
    """The ``zuno`` command in one workspace, one store and one scripted model."""

    def __init__(self, workspace: Path, db: Path, server: FakeModelServer) -> None:
        self.workspace = workspace
        self.env = {
            **os.environ,
            "ZUNO_DB": str(db),
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "sk-test",
        }

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [ZUNO, *args],
            cwd=self.workspace,
            env=self.env,
            input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None,
            capture_output=True,
            text=True,
            timeout=180,
        )

    def show(self, session: str) -> dict[str, Any]:
        proc = self.run("show", session, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def cli(workspace: Path, tmp_path: Path, model_server: FakeModelServer) -> Cli:
    return Cli(workspace, tmp_path / "modes.db", model_server)


def _session(stderr: str) -> str:
    found = re.search(r"[Ss]ession (ses_\w+)", stderr)
    assert found, stderr
    return found.group(1)


def _rows(shown: dict[str, Any]) -> list[tuple[str, str, str | None, str | None]]:
    return [(c["tool"], c["outcome"], c["block_kind"], c["mode"]) for c in shown["calls"]]


def _asked(shown: dict[str, Any]) -> list[str]:
    return [e["data"]["tool"] for e in shown["events"] if e["kind"] == "approval.requested"]


def _batch(*calls: tuple[str, dict[str, Any]]) -> str:
    return json.dumps([{"tool": tool, "args": args} for tool, args in calls])


def test_plan_mode_refuses_a_write_and_a_shell_call_and_runs_reads(
    cli: Cli, workspace: Path
) -> None:
    (workspace / "notes.md").write_text("notes\n")
    step = _batch(
        ("write", {"path": "new.txt", "content": "x\n"}),
        ("shell", {"command": "touch by-shell"}),
        ("read", {"path": "notes.md"}),
        ("plan_update", {"plan": "1. write new.txt"}),
    )
    proc = cli.run("batch", "-", "--mode", "plan", stdin=step)
    assert proc.returncode == 1, proc.stderr
    assert sorted(p.name for p in workspace.iterdir()) == ["notes.md"]
    # Refused by the mode, not for want of an approver: no hint to add --yes.
    assert "needed approval" not in proc.stderr and "--yes" not in proc.stderr
    shown = cli.show(_session(proc.stderr))
    assert _rows(shown) == [
        ("write", "blocked", "denied", "plan"),
        ("shell", "blocked", "denied", "plan"),
        ("read", "ok", None, "plan"),
        ("plan_update", "ok", None, "plan"),
    ]
    assert "plan mode" in shown["calls"][0]["result"]
    assert _asked(shown) == []
    # The same step with --yes is refused all the same: the mode is not an approval.
    proc = cli.run(
        "call", "write", '{"path": "new.txt", "content": "x"}', "--mode", "plan", "--yes"
    )
    assert proc.returncode == 1 and not (workspace / "new.txt").exists()


def test_accept_edits_writes_without_asking_but_commands_and_zuno_json_still_ask(
    cli: Cli, workspace: Path
) -> None:
    step = _batch(
        ("write", {"path": "src/app.py", "content": "print(1)\n"}),
        ("shell", {"command": "touch by-shell"}),
        ("write", {"path": "zuno.json", "content": "{}"}),
    )
    proc = cli.run("batch", "-", "--mode", "accept-edits", stdin=step)
    assert proc.returncode == 1
    assert (workspace / "src/app.py").read_text() == "print(1)\n"
    assert not (workspace / "by-shell").exists() and not (workspace / "zuno.json").exists()
    assert "shell needed approval and there is no terminal" in proc.stderr
    shown = cli.show(_session(proc.stderr))
    assert _rows(shown) == [
        ("write", "ok", None, "accept-edits"),
        ("shell", "blocked", "denied", "accept-edits"),
        ("write", "blocked", "denied", "accept-edits"),
    ]
    assert _asked(shown) == ["shell", "write"]


def test_a_direct_calls_mode_is_that_commands_only(cli: Cli, workspace: Path) -> None:
    first = cli.run("call", "write", '{"path": "a.txt", "content": "a"}', "--mode", "accept-edits")
    assert first.returncode == 0, first.stderr
    second = cli.run("call", "write", '{"path": "b.txt", "content": "b"}')
    assert second.returncode == 1 and not (workspace / "b.txt").exists()
    sid = _session(first.stderr)
    assert _session(second.stderr) == sid
    assert [row[3] for row in _rows(cli.show(sid))] == ["accept-edits", "strict"]


def test_an_unknown_mode_is_a_usage_error(cli: Cli) -> None:
    proc = cli.run("call", "read", '{"path": "x"}', "--mode", "yolo")
    assert proc.returncode == 2
    assert "'yolo' is not a mode" in proc.stderr and "accept-edits" in proc.stderr


def _write_reply(call_id: str, path: str) -> Reply:
    return Reply(tool_calls=[(call_id, "write", json.dumps({"path": path, "content": "x\n"}))])


def test_run_in_plan_mode_and_resume_keeps_it_until_switched(
    cli: Cli, workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(
        Reply(
            tool_calls=[
                ("c1", "write", json.dumps({"path": "one.txt", "content": "1\n"})),
                ("c2", "shell", json.dumps({"command": "touch two.txt"})),
            ]
        ),
        Reply(text="Planned."),
    )
    proc = cli.run("run", "plan it", "--model", MODEL, "--mode", "plan")
    assert proc.returncode == 0, proc.stderr
    sid = _session(proc.stderr)
    assert not (workspace / "one.txt").exists() and not (workspace / "two.txt").exists()
    # The model read why: plan mode, and that the user can switch.
    told = json.dumps(model_server.requests[1].body["messages"])
    assert "plan mode" in told and "switch the mode" in told

    model_server.enqueue(_write_reply("c3", "three.txt"), Reply(text="Still planning."))
    proc = cli.run("resume", sid, "now write it", "--model", MODEL)
    assert proc.returncode == 0, proc.stderr
    assert not (workspace / "three.txt").exists()

    model_server.enqueue(_write_reply("c4", "four.txt"), Reply(text="Written."))
    proc = cli.run("resume", sid, "go ahead", "--model", MODEL, "--mode", "accept-edits")
    assert proc.returncode == 0, proc.stderr
    assert (workspace / "four.txt").read_text() == "x\n"
    shown = cli.show(sid)
    assert _rows(shown) == [
        ("write", "blocked", "denied", "plan"),
        ("shell", "blocked", "denied", "plan"),
        ("write", "blocked", "denied", "plan"),
        ("write", "ok", None, "accept-edits"),
    ]
    assert _asked(shown) == []
    text = cli.run("show", sid)
    assert text.returncode == 0
    assert text.stdout.count("  plan mode") == 3 and text.stdout.count("  accept-edits mode") == 1


def test_headless_run_and_a_submitted_session_keep_their_mode(
    cli: Cli, workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(_write_reply("h1", "headless.txt"), Reply(text="ok"))
    proc = cli.run("run", "write it", "--model", MODEL, "--mode", "plan", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    sid = next(line["session_id"] for line in lines if line.get("session_id"))
    assert _rows(cli.show(sid)) == [("write", "blocked", "denied", "plan")]

    model_server.enqueue(_write_reply("w1", "worker.txt"), Reply(text="done"))
    queued = cli.run("submit", "write it", "--model", MODEL, "--mode", "plan", "--json")
    assert queued.returncode == 0, queued.stderr
    submitted = json.loads(queued.stdout)["session_id"]
    ran = cli.run("worker", "--once")
    assert ran.returncode == 0, ran.stderr
    assert not (workspace / "headless.txt").exists() and not (workspace / "worker.txt").exists()
    assert _rows(cli.show(submitted)) == [("write", "blocked", "denied", "plan")]
