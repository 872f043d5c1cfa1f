"""``zuno chat`` as a person uses it: a real terminal (tmux) and the scripted model server.

A conversation of several prompts in one session (``zuno`` alone starts it), the prompt
history, Esc interrupting a long command and a follow-up continuing, each slash command,
one-key approvals ("no, and tell the model why" included), a rule kept at "always" that
lets the next matching call through, and ``zuno resume ID`` without a prompt.
Commands that must keep running wait for a file the test creates: nothing depends on timing.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tmux_pane import (
    HOLD,
    MODEL,
    FakeModelServer,
    OpenPane,
    Pane,
    Reply,
    model_server,
    pane_factory,
    plain,
    tmux_needed,
)

__all__ = ["model_server", "pane_factory"]  # fixtures, imported for pytest

pytestmark = tmux_needed


_READY = "Ctrl-D leaves"


@pytest.fixture(autouse=True)
def _own_data_folder(tmp_path: Path) -> Iterator[Path]:
    """The prompt history goes to this test's data folder (XDG_DATA_HOME)."""
    old = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp_path / "data")
    yield tmp_path / "data"
    if old is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = old


def _user_config(**data: Any) -> Path:
    path = Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"
    path.write_text(json.dumps(data))
    return path


def _call(call_id: str, tool: str, **arguments: object) -> Reply:
    return Reply(tool_calls=[(call_id, tool, json.dumps(arguments))])


def _said(server: FakeModelServer, index: int) -> str:
    """Everything request ``index`` carried (messages as JSON text)."""
    return json.dumps(server.requests[index].body["messages"])


def _ask(pane: Pane, text: str, answer: str, count: int = 1) -> str:
    pane.type(text)
    return plain(pane.wait_text(answer, count))


def _leave(pane: Pane) -> str:
    pane.key("C-d")
    return plain(pane.wait_for(lambda t: plain(t).rstrip().endswith("shell$"), "the shell"))


def _sessions(tmp_path: Path) -> list[tuple[str, ...]]:
    db = sqlite3.connect(os.fspath(tmp_path / "zuno.db"))
    try:
        return db.execute("SELECT session_id, model FROM sessions").fetchall()
    finally:
        db.close()


def test_three_prompts_are_one_conversation_and_history_recalls_a_prompt(
    workspace: Path,
    tmp_path: Path,
    model_server: FakeModelServer,
    pane_factory: OpenPane,
    _own_data_folder: Path,
) -> None:
    _user_config(model=MODEL)
    model_server.enqueue(
        Reply(text="First answer."), Reply(text="Second answer."), Reply(text="Third answer.")
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno()  # no command, on a terminal: the chat
    pane.wait_text(_READY)
    _ask(pane, "what is alpha", "First answer.")
    _ask(pane, "and beta", "Second answer.")
    pane.key("Up")  # the history: the last prompt comes back, Enter sends it again
    pane.key("Enter")
    _ask_done = plain(pane.wait_text("Third answer."))
    assert "Second answer." in _ask_done
    shown = _leave(pane)
    assert "is saved; `zuno resume" in shown
    third = _said(model_server, 2)
    assert "what is alpha" in third and "First answer." in third and "Second answer." in third
    assert third.count("and beta") == 2  # the recalled prompt was sent as typed before
    assert len(_sessions(tmp_path)) == 1
    history = (_own_data_folder / "zuno" / "prompt-history").read_text()
    assert "what is alpha" in history and "and beta" in history


def test_esc_interrupts_a_long_command_and_a_follow_up_continues(
    workspace: Path, tmp_path: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    command = f"echo started-$((0+1)); {HOLD}; echo finished-$((1+1))"
    model_server.enqueue(_call("c1", "shell", command=command), Reply(text="Continuing now."))
    pane = pane_factory(workspace, model_server)
    pane.zuno("chat", "--model", MODEL)
    pane.wait_text(_READY)
    pane.type("run the long thing")
    pane.wait_text("allow?")
    pane.key("y")
    pane.wait_text("started-1")
    pane.key("Escape")
    pane.wait_text("interrupted")
    _ask(pane, "never mind, just say so", "Continuing now.")
    shown = _leave(pane)
    assert "finished-2" not in shown
    follow_up = _said(model_server, 1)
    assert "never mind, just say so" in follow_up and "run the long thing" in follow_up
    (result,) = [
        m for m in model_server.requests[1].body["messages"] if m.get("tool_call_id") == "c1"
    ]
    assert "cancel" in json.dumps(result).lower()
    db = sqlite3.connect(os.fspath(tmp_path / "zuno.db"))
    try:
        (row,) = db.execute("SELECT status, outcome FROM calls WHERE tool = 'shell'").fetchall()
    finally:
        db.close()
    assert row[0] == "finished" and row[1] in ("error", "uncertain")
    assert len(_sessions(tmp_path)) == 1


def test_tell_the_model_why_sends_the_typed_reason(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    model_server.enqueue(
        _call("c1", "shell", command="pip install requests"), Reply(text="Using uv then.")
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("chat", "--model", MODEL)
    pane.wait_text(_READY)
    pane.type("add requests")
    pane.wait_text("allow?")
    pane.key("t")  # one key, no Enter
    pane.wait_text("tell the model why:")
    pane.type("this project uses uv, not pip")
    pane.wait_text("Using uv then.")
    _leave(pane)
    assert "this project uses uv, not pip" in _said(model_server, 1)


def test_always_keeps_a_rule_that_lets_the_next_matching_command_run(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    model_server.enqueue(
        _call("c1", "shell", command="echo hello first"),
        _call("c2", "shell", command="echo hello second"),
        Reply(text="Both said hello."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("chat", "--model", MODEL)
    pane.wait_text(_READY)
    pane.type("say hello twice")
    pane.wait_text("allow?")
    pane.key("a")
    offer = plain(pane.wait_text("choose s or r"))
    assert 'commands starting "echo hello"' in offer
    assert "no command calls were made in this folder before" in offer
    pane.key("r")
    shown = plain(pane.wait_text("Both said hello."))
    assert shown.count("allow?") == 1 and "hello second" in shown
    _leave(pane)
    saved = json.loads((Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json").read_text())
    assert {"tool": "shell", "pattern": "echo hello", "action": "allow"} in saved["permission"][
        "rules"
    ]


def test_slash_commands(
    workspace: Path, tmp_path: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    model_server.enqueue(
        Reply(text="Earlier session."),
        _call("c1", "write", path="notes.md", content="chat line\n"),
        Reply(text="Wrote notes."),
        _call("c2", "write", path="plan.md", content="x\n"),
        Reply(text="Planned only."),
        Reply(text="Other model here."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "an earlier task", "--model", MODEL)
    pane.wait_text("Earlier session.")
    ((earlier, _model),) = _sessions(tmp_path)
    pane.zuno("chat", "--model", MODEL)
    pane.wait_text(_READY)
    pane.type("/help")
    pane.wait_text("/resume")
    pane.type("write the notes")
    pane.wait_text("allow?")
    pane.key("y")
    pane.wait_text("Wrote notes.")
    assert (workspace / "notes.md").read_text() == "chat line\n"
    pane.type("/diff")
    pane.wait_text("+chat line")
    pane.type("/undo")
    pane.wait_for(lambda t: not (workspace / "notes.md").exists(), "the undo")
    pane.type("/mode plan")
    pane.wait_text("permission mode: plan")
    pane.type("plan something")
    planned = plain(pane.wait_text("Planned only."))
    assert "plan mode" in planned.split("plan something")[-1]
    assert not (workspace / "plan.md").exists()
    pane.type("/cost")
    pane.wait_text("tokens")
    pane.type("/sessions")
    pane.wait_text(earlier)
    pane.type("/model openai:other-model")
    pane.wait_text("model: openai:other-model")
    pane.type(f"/resume {earlier}")
    pane.wait_text(f"continuing session {earlier}")
    pane.type("and now?")
    pane.wait_text("Other model here.")
    pane.type("/nope")
    pane.wait_text("unknown command /nope")
    pane.type("/exit")
    pane.wait_for(lambda t: plain(t).rstrip().endswith("shell$"), "the shell")

    last = model_server.requests[-1].body
    assert last["model"] == "other-model"
    assert "an earlier task" in json.dumps(last["messages"])


def test_resume_without_a_prompt_opens_the_chat(
    workspace: Path, tmp_path: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    model_server.enqueue(Reply(text="First run."), Reply(text="Resumed in chat."))
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "the first task", "--model", MODEL)
    pane.wait_text("First run.")
    ((session, _model),) = _sessions(tmp_path)
    pane.zuno("resume", session)
    pane.wait_text(_READY)
    _ask(pane, "a follow-up", "Resumed in chat.")
    _leave(pane)
    said = _said(model_server, 1)
    assert "the first task" in said and "a follow-up" in said
    assert len(_sessions(tmp_path)) == 1


def test_compact_sends_the_summary_instead_of_the_past(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    model_server.enqueue(
        Reply(text="First answer."),
        Reply(text="SUMMARY: the user asked about zebra-alpha."),
        Reply(text="Second answer."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("chat", "--model", MODEL)
    pane.wait_text(_READY)
    pane.type("tell me about zebra-alpha")
    pane.wait_text("First answer.")
    pane.type("/compact")
    pane.wait_text("compacted:")
    pane.type("and then?")
    pane.wait_text("Second answer.")
    _leave(pane)

    last = _said(model_server, len(model_server.requests) - 1)
    assert "SUMMARY: the user asked about zebra-alpha." in last
    assert "tell me about zebra-alpha" not in last  # the past is sent as its summary
    assert "and then?" in last
