"""``zuno resume`` and ``zuno show`` tell the truth, through the real command.

- resume continues in the session's stored workspace whatever the current
  folder; another folder only with ``--move-to``, and then the model is told;
- show prints the prompt, the model, each step's text and calls, every
  recovery notice (also once delivered), and a final answer only when the
  turn ended with one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from truth_cli import MODEL, ZUNO, FakeModelServer, Reply, Zuno, session_from

from zuno.durability.store import open_store


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def zuno(tmp_path: Path, model_server: FakeModelServer) -> Zuno:
    return Zuno(tmp_path / "truth.db", model_server)


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    other = tmp_path / "elsewhere"
    other.mkdir()
    return other


def _system_prompt(server: FakeModelServer) -> str:
    messages = server.requests[-1].body["messages"]
    assert messages[0]["role"] == "system"
    return str(messages[0]["content"])


def _stored_workspace(db: Path, session: str) -> str:
    store = open_store(db, migrate=False)
    try:
        record = store.get_session(session)
        assert record is not None
        return record.workspace
    finally:
        store.close()


def _stopped_at_step_limit(zuno: Zuno, workspace: Path, server: FakeModelServer) -> str:
    """A run whose one step wrote one.txt and then hit the step limit (resumable)."""
    server.enqueue(Reply(tool_calls=[("c1", "write", '{"path": "one.txt", "content": "1\\n"}')]))
    proc = zuno.run(
        workspace, "run", "write the files", "--model", MODEL, "--yes", "--max-steps", "1"
    )
    assert proc.returncode == 1, proc.stderr
    assert (workspace / "one.txt").read_text() == "1\n"
    return session_from(proc.stderr)


def test_resume_from_another_folder_works_in_the_stored_workspace(
    zuno: Zuno, workspace: Path, elsewhere: Path, model_server: FakeModelServer, tmp_path: Path
) -> None:
    session = _stopped_at_step_limit(zuno, workspace, model_server)
    model_server.enqueue(
        Reply(tool_calls=[("c2", "write", '{"path": "two.txt", "content": "2\\n"}')]),
        Reply(text="Both written."),
    )
    proc = zuno.ok(elsewhere, "resume", session, "--yes")
    assert "Both written." in proc.stdout
    # The write landed in the session's folder, not in the folder resume ran from.
    assert (workspace / "two.txt").read_text() == "2\n"
    assert not (elsewhere / "two.txt").exists()
    assert f"Workspace: {workspace.resolve()}" in _system_prompt(model_server)
    assert str(elsewhere) not in _system_prompt(model_server)
    assert _stored_workspace(tmp_path / "truth.db", session) == str(workspace.resolve())


def test_resume_with_another_workspace_is_refused_without_move_to(
    zuno: Zuno, workspace: Path, elsewhere: Path, model_server: FakeModelServer, tmp_path: Path
) -> None:
    session = _stopped_at_step_limit(zuno, workspace, model_server)
    asked = len(model_server.requests)
    proc = zuno.run(workspace, "resume", session, "--yes", "--workspace", str(elsewhere))
    assert proc.returncode == 2, proc.stderr
    assert "--move-to" in proc.stderr and str(workspace.resolve()) in proc.stderr
    assert len(model_server.requests) == asked  # nothing reached the model
    assert _stored_workspace(tmp_path / "truth.db", session) == str(workspace.resolve())


def test_resume_move_to_moves_the_session_and_tells_the_model(
    zuno: Zuno, workspace: Path, elsewhere: Path, model_server: FakeModelServer, tmp_path: Path
) -> None:
    session = _stopped_at_step_limit(zuno, workspace, model_server)
    model_server.enqueue(
        Reply(tool_calls=[("c2", "write", '{"path": "two.txt", "content": "2\\n"}')]),
        Reply(text="Written in the new folder."),
    )
    proc = zuno.ok(workspace, "resume", session, "--yes", "--move-to", str(elsewhere))
    assert (elsewhere / "two.txt").read_text() == "2\n"
    assert not (workspace / "two.txt").exists()
    assert str(elsewhere.resolve()) in proc.stderr  # the person sees the move too
    assert _stored_workspace(tmp_path / "truth.db", session) == str(elsewhere.resolve())
    # The model was told, in a user message it saw, where the session now works.
    first_request_of_resume = model_server.requests[-2].body["messages"]
    told = [
        m["content"]
        for m in first_request_of_resume
        if m["role"] == "user" and str(elsewhere.resolve()) in str(m["content"])
    ]
    assert told and str(workspace.resolve()) in told[0]
    assert f"Workspace: {elsewhere.resolve()}" in _system_prompt(model_server)
    # The note is part of the transcript a person reads.
    shown = zuno.ok(elsewhere, "show", session).stdout
    assert f"now continues in {elsewhere.resolve()}" in shown


def test_show_prints_prompt_model_step_text_calls_and_final_answer(
    zuno: Zuno, workspace: Path, model_server: FakeModelServer
) -> None:
    (workspace / "notes.txt").write_text("hello from the notes\n")
    model_server.enqueue(
        Reply(
            text="Reading the notes first.", tool_calls=[("c1", "read", '{"path": "notes.txt"}')]
        ),
        Reply(text="They say hello."),
    )
    proc = zuno.ok(workspace, "run", "What do the notes say?\nBe brief.", "--model", MODEL)
    session = session_from(proc.stderr)
    text = zuno.ok(workspace, "show", session).stdout
    lines = [line.strip() for line in text.splitlines()]
    assert f"model {MODEL}" in text
    assert "What do the notes say?" in text and "Be brief." in text
    step1 = lines.index("step 1")
    assert lines[step1 + 1] == "Reading the notes first."
    assert lines[step1 + 2].startswith("#0 read") and " ok " in lines[step1 + 2]
    answer = lines.index("final answer:")
    assert lines[answer + 1] == "They say hello."
    body = zuno.json(workspace, "show", session)
    assert body["model"] == MODEL
    assert body["prompt"] == "What do the notes say?\nBe brief."
    assert body["final_answer"] == "They say hello."
    assert [(s["step"], s["text"], [c["tool"] for c in s["calls"]]) for s in body["steps"]] == [
        (1, "Reading the notes first.", ["read"]),
        (2, "They say hello.", []),
    ]


def _wait_for(path: Path, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(1200):
        if path.exists():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("the shell call never started")


def test_interrupted_session_has_no_final_answer_and_keeps_its_recovery_notice(
    zuno: Zuno, workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(
        Reply(
            text="Starting the build.",
            tool_calls=[("c1", "shell", '{"command": "echo started > marker; sleep 60"}')],
        )
    )
    run = subprocess.Popen(
        [*ZUNO, "run", "Build it", "--model", MODEL, "--yes"],
        cwd=workspace,
        env=zuno.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the kill takes the command's processes too
    )
    _wait_for(workspace / "marker", run)
    os.killpg(run.pid, signal.SIGKILL)
    run.wait(timeout=60)
    (listed,) = zuno.json(workspace, "sessions")
    session = listed["session_id"]

    text = zuno.ok(workspace, "show", session).stdout
    # The text beside a tool call is not an answer.
    assert "final answer:" not in [line.strip() for line in text.splitlines()]
    assert "Starting the build." in text
    assert "no final answer" in text and f"zuno resume {session}" in text
    assert "Recovery notice (recovery attempt 1" in text
    body = zuno.json(workspace, "show", session)
    assert body["final_answer"] is None
    assert body["recovery"]["attempt"] == 1 and body["recovery_notices"] == []

    model_server.enqueue(Reply(text="I checked: the build was cut off."))
    zuno.ok(workspace, "resume", session, "--yes")
    sent = model_server.requests[-1].body["messages"]
    assert any("Recovery notice (recovery attempt 1" in str(m["content"]) for m in sent)

    # Delivered, the notice is still in the transcript (and in --json, from its table).
    text = zuno.ok(workspace, "show", session).stdout
    assert "Recovery notice (recovery attempt 1" in text
    assert "recovery notice (attempt 1, given to the model" in text
    lines = [line.strip() for line in text.splitlines()]
    assert lines[lines.index("final answer:") + 1] == "I checked: the build was cut off."
    body = zuno.json(workspace, "show", session)
    assert body["recovery"] is None
    (notice,) = body["recovery_notices"]
    assert notice["attempt"] == 1 and "shell" in notice["text"]
    assert body["final_answer"] == "I checked: the build was cut off."


def test_step_limit_text_beside_calls_is_not_a_final_answer(
    zuno: Zuno, workspace: Path, model_server: FakeModelServer
) -> None:
    (workspace / "a.txt").write_text("a\n")
    model_server.enqueue(
        Reply(text="Let me look at a.txt.", tool_calls=[("c1", "read", '{"path": "a.txt"}')])
    )
    proc = zuno.run(workspace, "run", "look", "--model", MODEL, "--max-steps", "1")
    assert proc.returncode == 1, proc.stderr
    session = session_from(proc.stderr)
    text = zuno.ok(workspace, "show", session).stdout
    assert "final answer:" not in [line.strip() for line in text.splitlines()]
    assert "Let me look at a.txt." in text
    assert "step limit" in text
    assert json.loads(zuno.ok(workspace, "show", session, "--json").stdout)["final_answer"] is None
