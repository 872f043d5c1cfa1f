"""``zuno run --json``: the event stream and exit statuses a program relies on.

Every test runs the real command in a subprocess against a real scripted model
server on 127.0.0.1, and judges by what the lines say, what the store holds
and what happened on disk. See docs/headless.md for the contract.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_api import FakeModelServer, Reply, free_port
from whole_reply_api import Whole, WholeReplyServer

from zuno.config.trust import trust

ZUNO = [sys.executable, "-m", "zuno"]
MODEL = "openai:fake-model"

EVERY_TYPE = {
    "session",
    "step",
    "text",
    "usage",
    "call.started",
    "call.settled",
    "approval.asked",
    "approval.answered",
    "recovery",
    "answer",
    "end",
}


def _env(base_url: str, db: Path) -> dict[str, str]:
    return {**os.environ, "ZUNO_DB": str(db), "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "k"}


def _zuno(workspace: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ZUNO, *args],
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )


def events_of(stdout: str) -> list[dict[str, Any]]:
    """Every stdout line as one event; checks the envelope every line must have."""
    lines = stdout.splitlines()
    assert lines, "no output"
    events = [json.loads(line) for line in lines]  # a line that is not JSON fails here
    assert [e["v"] for e in events] == [1] * len(events)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert all(isinstance(e["type"], str) for e in events)
    assert [e["type"] for e in events].count("end") == 1 and events[-1]["type"] == "end"
    return events


def of(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "run.db"


def test_every_event_type_through_a_whole_run(
    workspace: Path, db: Path, model_server: FakeModelServer
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    (workspace / "adir").mkdir()
    rules = [{"tool": "task", "action": "allow"}, {"tool": "write", "action": "allow"}]
    (workspace / "zuno.json").write_text(json.dumps({"permission": {"rules": rules}}))
    trust(workspace)
    model_server.enqueue(
        Reply(
            text="Looking around.",
            tool_calls=[
                ("c1", "read", '{"path": "a.txt"}'),
                ("c2", "shell", '{"command": "echo hi > hi.txt"}'),  # asks: denied
                ("c3", "write", '{"path": "adir", "content": "x"}'),  # a folder: error
            ],
        ),
        # The failed write makes this a recovery turn: look before changing anything.
        Reply(text="Checking.", tool_calls=[("c4", "read", '{"path": "a.txt"}')]),
        Reply(tool_calls=[("c5", "task", '{"agent": "explore", "prompt": "Read a.txt"}')]),
        Reply(tool_calls=[("k1", "read", '{"path": "a.txt"}')]),  # the child agent
        Reply(text="a.txt says alpha."),  # the child's answer
        Reply(text="The answer is alpha.", input_tokens=20, output_tokens=5),
    )
    proc = _zuno(
        workspace, _env(model_server.openai_base_url, db), "run", "Look", "--model", MODEL, "--json"
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    events = events_of(proc.stdout)
    assert {e["type"] for e in events} == EVERY_TYPE

    top, child = of(events, "session")
    sid = top["session_id"]
    assert top["seq"] == 1
    assert (top["agent"], top["model"], top["depth"]) == ("build", MODEL, 0)
    assert top["workspace"] == str(workspace.resolve()) and "read" in top["tools"]

    # Text deltas: the top agent's text, step by step, in order.
    texts = of(events, "text")
    assert "".join(t["delta"] for t in texts if t["step"] == 1) == "Looking around."
    assert "".join(t["delta"] for t in texts) == "Looking around.Checking.The answer is alpha."
    assert [s["step"] for s in of(events, "step") if s["session_id"] == sid] == [1, 2, 3, 4]

    # Calls: started before settled, settled once each, as the store has them.
    settled = {e["model_call_id"]: e for e in of(events, "call.settled")}
    started = {e["model_call_id"]: e for e in of(events, "call.started")}
    assert set(settled) == {"c1", "c2", "c3", "c4", "c5", "k1"}
    assert set(started) == {"c1", "c3", "c4", "c5", "k1"}  # c2 never ran
    for key, start in started.items():
        assert start["seq"] < settled[key]["seq"] and start["call_id"] == settled[key]["call_id"]
    assert settled["c1"]["declaration"] == {
        "effect": "read_only",
        "replay": "safe",
        "concurrency": "parallel_safe",
    }
    assert settled["c1"]["outcome"] == "ok" and "alpha" in settled["c1"]["result"]
    assert json.loads(settled["c1"]["arguments"])["path"] == "a.txt"
    assert (settled["c2"]["outcome"], settled["c2"]["block_kind"]) == ("blocked", "denied")
    assert not (workspace / "hi.txt").exists()
    assert settled["c3"]["outcome"] == "error"
    assert settled["c3"]["declaration"]["replay"] == "never"
    shown = json.loads(
        _zuno(workspace, _env(model_server.openai_base_url, db), "show", sid, "--json").stdout
    )
    assert [(c["call_id"], c["tool"], c["outcome"], c["block_kind"]) for c in shown["calls"]] == [
        (e["call_id"], e["tool"], e["outcome"], e["block_kind"])
        for e in of(events, "call.settled")
        if e["session_id"] == sid
    ]

    # The denied shell call: asked, answered no, by call id.
    (asked,) = of(events, "approval.asked")
    (answered,) = of(events, "approval.answered")
    assert asked["call_id"] == answered["call_id"] == settled["c2"]["call_id"]
    assert asked["tool"] == "shell" and answered["decision"] == "deny"
    assert asked["seq"] < answered["seq"] < settled["c2"]["seq"]

    # The failed write's recovery notice, before the step that receives it.
    (recovery,) = of(events, "recovery")
    assert recovery["call_ids"] == [settled["c3"]["call_id"]] and recovery["attempt"] == 1
    step2 = next(s for s in of(events, "step") if s["session_id"] == sid and s["step"] == 2)
    assert settled["c3"]["seq"] < recovery["seq"] < step2["seq"]

    # The child agent: its own session, under the task call.
    assert child["depth"] == 1 and child["agent"] == "explore"
    assert child["parent_call_id"] == settled["c5"]["call_id"]
    assert settled["k1"]["session_id"] == child["session_id"] and settled["k1"]["outcome"] == "ok"

    # Usage per reply, and the totals in the end event.
    usage = of(events, "usage")
    assert len(usage) == 6
    assert usage[-1]["input_tokens"] == 20 and usage[-1]["output_tokens"] == 5
    (answer,) = of(events, "answer")
    assert answer["text"] == "The answer is alpha." and answer["session_id"] == sid
    end = events[-1]
    assert (end["status"], end["exit_code"], end["session_id"]) == ("answered", 0, sid)
    assert end["usage"] == {
        "input_tokens": sum(u["input_tokens"] for u in usage),
        "output_tokens": sum(u["output_tokens"] for u in usage),
        "cached_input_tokens": None,  # no reply reported any
        "cost_usd": None,  # the fake model has no price
    }
    assert end["calls"] == {"blocked": 1, "error": 1, "ok": 3}


def test_step_limit_exits_1(workspace: Path, db: Path, model_server: FakeModelServer) -> None:
    (workspace / "a.txt").write_text("a\n")
    model_server.enqueue(
        *[Reply(tool_calls=[(f"c{i}", "read", '{"path": "a.txt"}')]) for i in range(2)]
    )
    env = _env(model_server.openai_base_url, db)
    proc = _zuno(workspace, env, "run", "loop", "--model", MODEL, "--json", "--max-steps", "2")
    assert proc.returncode == 1
    events = events_of(proc.stdout)
    assert not of(events, "answer")
    end = events[-1]
    assert (end["status"], end["exit_code"], end["steps"]) == ("step_limit", 1, 2)
    assert "step limit" in end["message"] and "step limit" in proc.stderr


def test_model_error_exits_1_and_says_why(workspace: Path, db: Path) -> None:
    env = _env(f"http://127.0.0.1:{free_port()}/v1", db)
    proc = _zuno(workspace, env, "run", "hello", "--model", MODEL, "--json")
    assert proc.returncode == 1
    events = events_of(proc.stdout)
    assert [e["type"] for e in events] == ["session", "step", "end"]
    end = events[-1]
    assert (end["status"], end["exit_code"]) == ("provider_error", 1)
    assert "OPENAI_BASE_URL" in end["message"] and end["session_id"] == events[0]["session_id"]
    assert "Traceback" not in proc.stderr


def test_usage_error_exits_2_with_only_an_end_line(
    workspace: Path, db: Path, model_server: FakeModelServer
) -> None:
    proc = _zuno(workspace, _env(model_server.openai_base_url, db), "run", "hi", "--json")
    assert proc.returncode == 2
    (end,) = events_of(proc.stdout)
    assert (end["status"], end["exit_code"], end["session_id"]) == ("usage_error", 2, None)
    assert "--model" in end["message"] and "--model" in proc.stderr
    assert model_server.requests == []


@pytest.mark.parametrize("headless", [True, False], ids=["json", "plain"])
def test_store_unavailable_exits_4(
    headless: bool, workspace: Path, tmp_path: Path, model_server: FakeModelServer
) -> None:
    folder = tmp_path / "not-a-file"
    folder.mkdir()
    env = _env(model_server.openai_base_url, folder)
    flags = ["--json"] if headless else []
    proc = _zuno(workspace, env, "run", "hi", "--model", MODEL, *flags)
    assert proc.returncode == 4, proc.stderr
    assert "folder" in proc.stderr and "Traceback" not in proc.stderr
    if headless:
        (end,) = events_of(proc.stdout)
        assert (end["status"], end["exit_code"]) == ("store_unavailable", 4)
    assert model_server.requests == []


class SilentModel:
    """A listener that accepts connections and never answers: a model thinking forever."""

    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        self._sock.close()
        for conn in self._held:
            conn.close()


@pytest.fixture
def silent_model() -> Iterator[SilentModel]:
    model = SilentModel()
    yield model
    model.close()


def _read_until_step(proc: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    """Events as they come, until the first model step has begun (bounded)."""
    assert proc.stdout is not None
    seen: list[dict[str, Any]] = []
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        for _ in range(200):
            if not selector.select(timeout=60):
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            seen += [json.loads(line) for line in lines]
            if any(e["type"] == "step" for e in seen):
                return seen
    raise AssertionError(f"no step event: {seen}")


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"]
)
def test_interrupted_run_ends_with_its_status(
    signum: int, code: int, workspace: Path, db: Path, silent_model: SilentModel
) -> None:
    proc = subprocess.Popen(
        [*ZUNO, "run", "hello", "--model", MODEL, "--json"],
        cwd=workspace,
        env=_env(silent_model.url, db),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        before = _read_until_step(proc)
        proc.send_signal(signum)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    events = before + [json.loads(line) for line in rest.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    end = events[-1]
    assert (end["type"], end["status"], end["exit_code"]) == ("end", "interrupted", code)
    assert end["session_id"] == events[0]["session_id"]
    assert b"Traceback" not in err


def test_a_whole_json_reply_streams_as_one_text_event(workspace: Path, db: Path) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    with WholeReplyServer() as server:
        server.enqueue(
            Whole(Reply(text="Reading.", tool_calls=[("t1", "read", '{"path": "a.txt"}')])),  # type: ignore[arg-type]
            Whole(Reply(text="It says alpha.")),  # type: ignore[arg-type]
        )
        proc = _zuno(
            workspace, _env(server.openai_base_url, db), "run", "a?", "--model", MODEL, "--json"
        )
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    assert [t["delta"] for t in of(events, "text")] == ["Reading.", "It says alpha."]
    (settled,) = of(events, "call.settled")
    assert (settled["model_call_id"], settled["outcome"]) == ("t1", "ok")
    assert of(events, "answer")[0]["text"] == "It says alpha."


def test_on_a_terminal_json_asks_nothing(
    workspace: Path, db: Path, model_server: FakeModelServer
) -> None:
    # An untrusted zuno.json that would allow the write: on a terminal a plain run
    # offers to trust it; --json must not ask, and must not prompt for the write.
    rules = [{"tool": "write", "action": "allow"}]
    (workspace / "zuno.json").write_text(json.dumps({"permission": {"rules": rules}}))
    model_server.enqueue(
        Reply(tool_calls=[("w1", "write", '{"path": "yes.txt", "content": "x"}')]),
        Reply(text="Could not write."),
    )
    master, slave = os.openpty()
    try:
        proc = subprocess.run(
            [*ZUNO, "run", "write it", "--model", MODEL, "--json"],
            cwd=workspace,
            env={**_env(model_server.openai_base_url, db), "TERM": "dumb"},
            stdin=slave,
            stderr=slave,
            stdout=subprocess.PIPE,
            timeout=120,  # a prompt would wait for an answer that never comes
        )
        os.set_blocking(master, False)
        try:
            terminal = os.read(master, 65536).decode("utf-8", "replace")
        except BlockingIOError:
            terminal = ""
    finally:
        os.close(master)
        os.close(slave)
    assert proc.returncode == 0, terminal
    assert "Trust this folder" not in terminal and "Allow?" not in terminal
    events = events_of(proc.stdout.decode())
    assert of(events, "approval.answered")[0]["decision"] == "deny"
    assert not (workspace / "yes.txt").exists()


def test_yes_approves_without_asking(
    workspace: Path, db: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(
        Reply(tool_calls=[("w1", "write", '{"path": "yes.txt", "content": "x"}')]),
        Reply(text="Written."),
    )
    env = _env(model_server.openai_base_url, db)
    proc = _zuno(workspace, env, "run", "write it", "--model", MODEL, "--json", "--yes")
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    (answered,) = of(events, "approval.answered")
    assert answered["decision"] == "once"
    assert (workspace / "yes.txt").read_text() == "x"
    assert of(events, "call.settled")[0]["outcome"] == "ok"


def _user_texts(server: FakeModelServer) -> list[str]:
    """The user messages of the last request the model server received."""
    messages: list[dict[str, Any]] = server.requests[-1].body["messages"]
    return [str(m["content"]) for m in messages if m["role"] == "user"]


def test_the_end_event_reports_the_whole_run(
    workspace: Path, db: Path, model_server: FakeModelServer
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    rules = [{"tool": "write", "action": "allow"}]
    (workspace / "zuno.json").write_text(json.dumps({"permission": {"rules": rules}}))
    trust(workspace)
    model_server.enqueue(
        Reply(
            text="Working.",
            tool_calls=[
                ("r1", "read", '{"path": "a.txt"}'),
                ("w1", "write", '{"path": "out.txt", "content": "new\\n"}'),
                ("s1", "shell", '{"command": "touch denied.txt"}'),  # asks: denied
            ],
            cached_tokens=4,
        ),
        Reply(text="All done.", cached_tokens=6),
    )
    env = _env(model_server.openai_base_url, db)
    proc = _zuno(workspace, env, "run", "Go", "--model", MODEL, "--json")
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    settled = {e["model_call_id"]: e for e in of(events, "call.settled")}
    assert isinstance(settled["r1"]["duration_ms"], int) and settled["r1"]["duration_ms"] >= 0
    assert isinstance(settled["w1"]["duration_ms"], int)
    assert settled["s1"]["duration_ms"] is None  # refused: it never ran
    assert [u["cached_input_tokens"] for u in of(events, "usage")] == [4, 6]
    end = events[-1]
    assert end["answer"] == "All done." and end["is_error"] is False
    durations = end["durations"]
    assert set(durations) == {"total_ms", "model_ms", "tools_ms"}
    assert all(isinstance(v, int) and v >= 0 for v in durations.values())
    assert durations["total_ms"] >= durations["model_ms"] + durations["tools_ms"]
    assert end["usage"]["cached_input_tokens"] == 10
    (denied,) = end["denied"]
    assert denied["tool"] == "shell" and denied["model_call_id"] == "s1"
    assert denied["call_id"] == settled["s1"]["call_id"]
    assert "touch denied.txt" in denied["arguments"]
    assert end["changed_files"] == ["out.txt"]


def test_a_failed_run_is_an_error_without_an_answer(workspace: Path, db: Path) -> None:
    env = _env(f"http://127.0.0.1:{free_port()}/v1", db)
    proc = _zuno(workspace, env, "run", "hello", "--model", MODEL, "--json")
    end = events_of(proc.stdout)[-1]
    assert (end["is_error"], end["answer"], end["denied"], end["changed_files"]) == (
        True,
        None,
        [],
        [],
    )


def test_resume_json_stdin_prompt_single_object_and_last_message(
    workspace: Path, db: Path, tmp_path: Path, model_server: FakeModelServer
) -> None:
    env = _env(model_server.openai_base_url, db)
    model_server.enqueue(Reply(text="First answer."), Reply(text="Second answer."))
    # A prompt of - is read from standard input.
    first = subprocess.run(
        [*ZUNO, "run", "-", "--model", MODEL, "--json"],
        cwd=workspace,
        env=env,
        input="A prompt from stdin\n",
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert first.returncode == 0, first.stderr
    assert _user_texts(model_server) == ["A prompt from stdin\n"]
    sid = events_of(first.stdout)[0]["session_id"]

    # resume --json: the same session goes on, as events.
    resumed = _zuno(workspace, env, "resume", sid, "And now?", "--json")
    assert resumed.returncode == 0, resumed.stderr
    events = events_of(resumed.stdout)
    assert events[0]["type"] == "session" and events[0]["session_id"] == sid
    assert [s["step"] for s in of(events, "step")] == [2]
    assert events[-1]["answer"] == "Second answer." and events[-1]["session_id"] == sid
    assert _user_texts(model_server) == ["A prompt from stdin\n", "And now?"]

    # --output-format json: one object; --output-last-message: the answer in a file.
    model_server.enqueue(Reply(text="Third answer."))
    saved = tmp_path / "last.txt"
    proc = _zuno(
        workspace,
        env,
        "resume",
        sid,
        "Once more",
        "--output-format",
        "json",
        "--output-last-message",
        str(saved),
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    only = json.loads(lines[0])
    assert (only["type"], only["status"], only["answer"]) == ("end", "answered", "Third answer.")
    assert only["session_id"] == sid and only["is_error"] is False
    assert saved.read_text() == "Third answer."


def test_resume_json_of_an_unknown_session_ends_with_a_usage_error(
    workspace: Path, db: Path, model_server: FakeModelServer
) -> None:
    proc = _zuno(workspace, _env(model_server.openai_base_url, db), "resume", "ses_nope", "--json")
    assert proc.returncode == 2
    (end,) = events_of(proc.stdout)
    assert (end["status"], end["session_id"]) == ("usage_error", None)
    assert "Traceback" not in proc.stderr


def test_a_compaction_is_an_event(workspace: Path, db: Path, model_server: FakeModelServer) -> None:
    user_config = Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"
    user_config.write_text(json.dumps({"models": {MODEL: {"context_window": 1000}}}))
    (workspace / "a.txt").write_text("alpha\n")
    model_server.enqueue(
        Reply(tool_calls=[("r1", "read", '{"path": "a.txt"}')], input_tokens=990),
        Reply(text="SUMMARY: a.txt read, it says alpha."),
        Reply(text="alpha"),
    )
    try:
        proc = _zuno(
            workspace,
            _env(model_server.openai_base_url, db),
            "run",
            "a?",
            "--model",
            MODEL,
            "--json",
        )
    finally:
        user_config.unlink()
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    (compaction,) = of(events, "compaction")
    assert (compaction["number"], compaction["reason"]) == (1, "context")
    assert compaction["summary"] == "SUMMARY: a.txt read, it says alpha."
    usage = of(events, "usage")
    assert [u["step"] for u in usage] == [1, None, 2]
    step2 = next(s for s in of(events, "step") if s["step"] == 2)
    assert compaction["seq"] < step2["seq"]
    assert events[-1]["answer"] == "alpha"
