"""``zuno run`` / ``zuno resume`` as a user runs them: a real process against the fake server.

The inline approval and question tests run the command on a pseudo-terminal
and answer its prompts as a person would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_api import FakeModelServer, Reply, free_port

from zuno.config.trust import trust

ZUNO = [sys.executable, "-m", "zuno"]
MODEL = "openai:fake-model"


class Cli:
    def __init__(self, workspace: Path, db: Path, server: FakeModelServer) -> None:
        self.workspace = workspace
        self.env = {
            **os.environ,
            "ZUNO_DB": str(db),
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "sk-test",
        }

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*ZUNO, *args],
            cwd=self.workspace,
            env=env or self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def json(self, *args: str) -> Any:
        proc = self.run(*args, "--json")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


@pytest.fixture
def cli(workspace: Path, tmp_path: Path, model_server: FakeModelServer) -> Cli:
    return Cli(workspace, tmp_path / "run.db", model_server)


def session_from(stderr: str) -> str:
    match = re.search(r"Session (ses_\w+)", stderr)
    assert match, stderr
    return match.group(1)


def test_run_non_interactive_end_to_end(
    cli: Cli, workspace: Path, model_server: FakeModelServer
) -> None:
    (workspace / "notes.txt").write_text("the answer is 42\n")
    model_server.enqueue(
        Reply(
            text="Looking around.",
            tool_calls=[
                ("c1", "read", '{"path": "notes.txt"}'),
                ("c2", "levitate", "{}"),
                ("c3", "write", '{"path": "out.txt", "content": "x"}'),
            ],
        ),
        Reply(tool_calls=[("c4", "task", '{"agent": "explore", "prompt": "Check notes.txt"}')]),
        Reply(text="It is 42.", tool_calls=[("k1", "read", '{"path": "notes.txt"}')]),
        Reply(text="notes.txt says 42."),
        Reply(text="The answer is 42."),
    )
    config = {"permission": {"rules": [{"tool": "task", "action": "allow"}]}}
    (workspace / "zuno.json").write_text(json.dumps(config))
    trust(workspace)  # allow rules count from a trusted folder only
    proc = cli.run("run", "What is the answer?", "--model", MODEL)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "The answer is 42." in proc.stdout
    assert "Looking around." in proc.stdout
    err = proc.stderr
    assert "read [read_only/safe/parallel_safe]" in err
    assert "levitate blocked: unavailable" in err
    # Strict mode without a terminal: the write is denied, the allowed task runs.
    assert "write blocked: denied" in err
    assert not (workspace / "out.txt").exists()
    assert "agent explore started" in err
    sid = session_from(err)

    shown = cli.json("show", sid)
    assert [(c["tool"], c["outcome"]) for c in shown["calls"]] == [
        ("read", "ok"),
        ("levitate", "blocked"),
        ("write", "blocked"),
        ("task", "ok"),
    ]
    (child,) = shown["children"]
    child_shown = cli.json("show", child)
    assert child_shown["agent"] == "explore"
    assert child_shown["parent_call_id"] == shown["calls"][3]["call_id"]
    assert [c["tool"] for c in child_shown["calls"]] == ["read"]
    text = cli.run("show", sid).stdout
    assert "child sessions:" in text and child in text


def test_missing_key_is_a_clear_error(cli: Cli) -> None:
    env = {k: v for k, v in cli.env.items() if k != "OPENAI_API_KEY"}
    proc = cli.run("run", "hi", "--model", MODEL, env=env)
    assert proc.returncode == 2
    assert "OPENAI_API_KEY" in proc.stderr and "Traceback" not in proc.stderr


def test_no_model_is_a_clear_error(cli: Cli) -> None:
    proc = cli.run("run", "hi")
    assert proc.returncode == 2
    assert "--model" in proc.stderr and "zuno.json" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unreachable_provider_then_resume(cli: Cli, model_server: FakeModelServer) -> None:
    env = {**cli.env, "OPENAI_BASE_URL": f"http://127.0.0.1:{free_port()}/v1"}
    proc = cli.run("run", "hello there", "--model", MODEL, env=env)
    assert proc.returncode == 1
    assert "OPENAI_BASE_URL" in proc.stderr and "Traceback" not in proc.stderr
    sid = session_from(proc.stderr)
    assert f"zuno resume {sid}" in proc.stderr
    model_server.enqueue(Reply(text="Hello, resumed."))
    resumed = cli.run("resume", sid)
    assert resumed.returncode == 0, resumed.stderr
    assert "Hello, resumed." in resumed.stdout
    sent = model_server.requests[-1].body["messages"]
    assert sent[-1] == {"role": "user", "content": "hello there"}
    # An answered session needs a new instruction.
    again = cli.run("resume", sid)
    assert again.returncode == 2 and "ended with an answer" in again.stderr
    model_server.enqueue(Reply(text="Second answer."))
    follow = cli.run("resume", sid, "one more thing")
    assert follow.returncode == 0 and "Second answer." in follow.stdout


def test_step_limit_exits_1_with_the_reason(
    cli: Cli, workspace: Path, model_server: FakeModelServer
) -> None:
    (workspace / "a.txt").write_text("a\n")
    model_server.enqueue(
        *[Reply(tool_calls=[(f"c{i}", "read", '{"path": "a.txt"}')]) for i in range(2)]
    )
    proc = cli.run("run", "loop", "--model", MODEL, "--max-steps", "2")
    assert proc.returncode == 1
    assert "step limit" in proc.stderr and "zuno resume" in proc.stderr


# -- on a terminal -----------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


class Terminal:
    """A process on a pseudo-terminal, with its output collected as it comes."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        master, slave = os.openpty()
        self._master = master
        self.proc = subprocess.Popen(
            args,
            cwd=cwd,
            env={**env, "TERM": "dumb", "COLUMNS": "200"},
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self._buffer = ""
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 4096)
            except OSError:
                data = b""
            with self._changed:
                if not data:
                    self._buffer += "\0EOF"
                    self._changed.notify_all()
                    return
                self._buffer += _ANSI.sub("", data.decode("utf-8", "replace"))
                self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return self._buffer.replace("\r\n", "\n")

    def wait_for(self, text: str, count: int = 1) -> None:
        with self._changed:
            ok = self._changed.wait_for(
                lambda: self._buffer.count(text) >= count or "\0EOF" in self._buffer, timeout=60
            )
        assert ok and self.output.count(text) >= count, self.output

    def send(self, line: str) -> None:
        os.write(self._master, (line + "\n").encode())

    def finish(self) -> int:
        code = self.proc.wait(timeout=60)
        self._reader.join(timeout=10)
        os.close(self._master)
        return code


@pytest.fixture
def terminal_factory(cli: Cli) -> Iterator[list[Terminal]]:
    opened: list[Terminal] = []
    yield opened
    for term in opened:
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait()


def test_approvals_and_questions_answered_inline(
    cli: Cli,
    workspace: Path,
    model_server: FakeModelServer,
    terminal_factory: list[Terminal],
) -> None:
    question = {
        "questions": [
            {
                "header": "Style",
                "question": "Tabs or spaces?",
                "options": [{"label": "tabs"}, {"label": "spaces"}],
            }
        ]
    }
    model_server.enqueue(
        Reply(
            tool_calls=[
                ("c1", "write", '{"path": "yes.txt", "content": "approved"}'),
                ("c2", "write", '{"path": "no.txt", "content": "denied"}'),
            ]
        ),
        Reply(tool_calls=[("c3", "question", json.dumps(question))]),
        Reply(text="Spaces, then."),
    )
    term = Terminal([*ZUNO, "run", "set up the files", "--model", MODEL], workspace, cli.env)
    terminal_factory.append(term)
    term.wait_for("allow?")
    assert "yes.txt" in term.output
    term.send("y")
    term.wait_for("allow?", count=2)
    term.send("n")
    term.wait_for("Answer with")
    assert "Tabs or spaces?" in term.output and "2. spaces" in term.output
    term.send("2")
    code = term.finish()
    out = term.output
    assert code == 0, out
    assert (workspace / "yes.txt").read_text() == "approved"
    assert not (workspace / "no.txt").exists()
    assert "approval for write: once" in out and "approval for write: deny" in out
    assert "Spaces, then." in out
    answers = model_server.requests[2].body["messages"][-1]
    assert answers["tool_call_id"] == "c3" and "Style: spaces" in answers["content"]
    sid = session_from(out)
    shown = cli.json("show", sid)
    assert [(c["tool"], c["outcome"], c["block_kind"]) for c in shown["calls"]] == [
        ("write", "ok", None),
        ("write", "blocked", "denied"),
        ("question", "ok", None),
    ]


def test_anthropic_model_honours_its_variables(
    cli: Cli, workspace: Path, model_server: FakeModelServer
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    model_server.enqueue(
        Reply(tool_calls=[("t1", "read", '{"path": "a.txt"}'), ("t2", "read", "{oops")]),
        Reply(text="It says alpha."),
    )
    env = {
        **cli.env,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "ANTHROPIC_BASE_URL": model_server.anthropic_base_url,
    }
    proc = cli.run("run", "read a.txt", "--model", "anthropic:fake-claude", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "It says alpha." in proc.stdout
    assert "read blocked: invalid_arguments" in proc.stderr
    first = model_server.requests[0]
    assert first.api == "anthropic" and first.body["model"] == "fake-claude"
    results = [
        block
        for message in model_server.requests[1].body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert [b["tool_use_id"] for b in results] == ["t1", "t2"]


@pytest.mark.parametrize("flags", [[], ["--json"]], ids=["plain", "json"])
def test_no_ripgrep_is_one_line_exit_2_and_the_session_settled(
    flags: list[str], cli: Cli, model_server: FakeModelServer
) -> None:
    model_server.enqueue(Reply(text="never asked"))
    env = {**cli.env, "ZUNO_RG": str(cli.workspace / "no-such-rg")}
    proc = cli.run("run", "find x", "--model", MODEL, *flags, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "ripgrep >= 14 is required" in lines[0], proc.stderr
    assert "ZUNO_RG" in lines[0]  # the fix is named
    sessions: list[dict[str, Any]] = cli.json("sessions")
    (session,) = sessions
    assert session["state"] != "running", session
    if flags:
        end = json.loads(proc.stdout.splitlines()[-1])
        assert (end["status"], end["exit_code"]) == ("usage_error", 2)


def test_plain_run_saves_the_last_message_and_reads_a_stdin_prompt(
    cli: Cli, tmp_path: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(Reply(text="The answer."))
    saved = tmp_path / "answer.txt"
    proc = subprocess.run(
        [*ZUNO, "run", "-", "--model", MODEL, "--output-last-message", str(saved)],
        cwd=cli.workspace,
        env=cli.env,
        input="Question from a pipe",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert saved.read_text() == "The answer."
    sent: list[dict[str, Any]] = model_server.requests[0].body["messages"]
    assert sent[-1] == {"role": "user", "content": "Question from a pipe"}
