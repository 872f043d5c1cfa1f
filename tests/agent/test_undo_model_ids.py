"""The model undoes its own calls by its own ids, and is told which results can be undone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import make_runtime, run_turn
from fake_api import FakeModelServer, Reply

from zuno.config.trust import trust


def _tool_results(server: FakeModelServer, request: int) -> dict[str, str]:
    messages: list[dict[str, Any]] = server.requests[request].body["messages"]
    return {m["tool_call_id"]: str(m["content"]) for m in messages if m["role"] == "tool"}


@pytest.mark.anyio
async def test_the_model_undoes_a_write_by_its_own_call_id(
    workspace: Path, model_server: FakeModelServer
) -> None:
    (workspace / "notes.txt").write_text("before\n")
    model_server.enqueue(
        Reply(tool_calls=[("r0", "read", '{"path": "notes.txt"}')]),
        Reply(
            tool_calls=[
                ("w1", "write", '{"path": "notes.txt", "content": "after\\n"}'),
                ("r1", "read", '{"path": "notes.txt"}'),
            ]
        ),
        Reply(tool_calls=[("u1", "undo", '{"call": "w1"}')]),
        Reply(text="Put back."),
    )
    rt = make_runtime(workspace, model_server, tools={"undo": True})
    try:
        outcome = await run_turn(rt, "Change notes, then take it back")
        assert outcome.answered
        written = next(c for c in rt.store.calls(outcome.session_id) if c.tool == "write")
        first = _tool_results(model_server, 2)
        # The side-effecting result says it can be undone, and how; a read says nothing.
        assert written.call_id in first["w1"] and '{"call": "w1"}' in first["w1"]
        assert "undone" not in first["r1"] and "undone" not in first["r0"]
        assert "after" in first["r1"]
        second = _tool_results(model_server, 3)
        assert "Undid" in second["u1"] and written.call_id in second["u1"], second["u1"]
        assert (workspace / "notes.txt").read_text() == "before\n"
    finally:
        rt.close()


@pytest.mark.anyio
async def test_without_the_undo_tool_the_note_names_the_command(
    workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(
        Reply(tool_calls=[("w1", "write", '{"path": "new.txt", "content": "x"}')]),
        Reply(text="Written."),
    )
    rt = make_runtime(workspace, model_server)
    try:
        outcome = await run_turn(rt, "Write it")
        written = next(c for c in rt.store.calls(outcome.session_id) if c.tool == "write")
        assert f"zuno undo {written.call_id}" in _tool_results(model_server, 1)["w1"]
    finally:
        rt.close()


def test_zuno_diff_and_undo_take_the_models_id(
    workspace: Path, tmp_path: Path, model_server: FakeModelServer
) -> None:
    rules = [{"tool": "write", "action": "allow"}]
    (workspace / "zuno.json").write_text(json.dumps({"permission": {"rules": rules}}))
    trust(workspace)
    model_server.enqueue(
        Reply(tool_calls=[("toolu_w1", "write", '{"path": "new.txt", "content": "x\\n"}')]),
        Reply(text="Written."),
    )
    env = {
        **os.environ,
        "ZUNO_DB": str(tmp_path / "run.db"),
        "OPENAI_BASE_URL": model_server.openai_base_url,
        "OPENAI_API_KEY": "k",
    }

    def zuno(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "zuno", *args],
            cwd=workspace,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert zuno("run", "write", "--model", "openai:fake-model").returncode == 0
    diff = zuno("diff", "toolu_w1", "--json")
    assert diff.returncode == 0, diff.stderr
    assert [f["path"] for f in json.loads(diff.stdout)["files"]] == ["new.txt"]
    undone = zuno("undo", "toolu_w1")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert not (workspace / "new.txt").exists()
