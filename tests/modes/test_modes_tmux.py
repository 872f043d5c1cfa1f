"""Switching the permission mode during ``zuno run``, as a person at a real terminal (tmux).

At the approval of a file edit the person answers ``e``: this edit runs, the session
switches to accept-edits, the next edit runs without a prompt, and a command still asks.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "cli"))

from tmux_pane import (
    MODEL,
    FakeModelServer,
    Pane,
    Reply,
    model_server,
    pane_factory,
    plain,
    tmux_needed,
)

__all__ = ["model_server", "pane_factory"]  # fixtures, imported for pytest

pytestmark = tmux_needed

OpenPane = Callable[[Path, FakeModelServer], Pane]


def _write(call_id: str, path: str) -> Reply:
    return Reply(tool_calls=[(call_id, "write", json.dumps({"path": path, "content": "x\n"}))])


def test_answering_e_switches_the_running_session_to_accept_edits(
    workspace: Path, tmp_path: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    model_server.enqueue(
        _write("c1", "first.txt"),
        _write("c2", "second.txt"),
        Reply(tool_calls=[("c3", "shell", json.dumps({"command": "touch third.txt"}))]),
        Reply(text="All three tried."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "write files", "--model", MODEL)
    asked = plain(pane.wait_text("allow?"))
    assert "[e] yes, and accept file edits" in asked and "write first.txt" in asked
    pane.type("e")
    pane.wait_text("permission mode: accept-edits")
    # The command still asks; the second write did not (one prompt for writes in all).
    shell_prompt = plain(pane.wait_text("allow?", count=2))
    assert "$ touch third.txt" in shell_prompt.split("accept-edits")[-1]
    assert "[e] yes" not in shell_prompt.split("permission mode")[-1]
    pane.type("n")
    done = plain(pane.wait_text("All three tried."))
    assert done.count("allow?") == 2
    assert (workspace / "first.txt").exists() and (workspace / "second.txt").exists()
    assert not (workspace / "third.txt").exists()

    db = sqlite3.connect(os.fspath(tmp_path / "zuno.db"))
    try:
        rows = db.execute(
            "SELECT tool, outcome, block_kind, mode FROM calls ORDER BY started_at"
        ).fetchall()
        (options,) = db.execute("SELECT options FROM sessions").fetchone()
    finally:
        db.close()
    assert rows == [
        ("write", "ok", None, "strict"),
        ("write", "ok", None, "accept-edits"),
        ("shell", "blocked", "denied", "accept-edits"),
    ]
    assert json.loads(options)["mode"] == "accept-edits"  # a resume keeps it
