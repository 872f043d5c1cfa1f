"""A served command at a real terminal (tmux): it asks, reads the answer, and Ctrl-C ends it.

The command server's child has no controlling terminal of its own; it is handed
the caller's. What a person sees must not change: the approval is asked on the
terminal and answered there, Ctrl-C at the prompt ends the command at once, and
the next line typed reaches the shell. Served is told from the server's log.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmux_pane import Pane, plain, tmux_needed

from zuno.cli.server_wire import SERVED_COMMANDS

ZUNO = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "zuno")
ASK = "allow? [y]es / [n]o / [a]lways / [t] no, tell the model why"
pytestmark = tmux_needed


@pytest.fixture
def served_pane(workspace: Path, tmp_path: Path) -> Iterator[tuple[Pane, dict[str, str]]]:
    """A pane whose zuno uses a command server of this test's own, already running."""
    run = Path(tempfile.mkdtemp(prefix="zt-", dir="/tmp"))
    os.chmod(run, 0o700)
    env = {
        **os.environ,
        "ZUNO_DB": str(tmp_path / "zuno.db"),
        "ZUNO_SERVER": "on",
        "ZUNO_SERVER_IDLE": "120",
        "XDG_RUNTIME_DIR": str(run),
    }
    for attempt in range(300):  # the server imports everything once: bounded wait
        if attempt % 50 == 0:
            subprocess.run([ZUNO, "tools"], cwd=workspace, env=env, capture_output=True)
        state = subprocess.run(
            [ZUNO, "server", "status", "--json"], env=env, capture_output=True, text=True
        )
        if json.loads(state.stdout)["running"]:
            break
        time.sleep(0.2)
    folder = tmp_path / "tmux"
    folder.mkdir()
    pane = Pane(folder, workspace, env)
    try:
        yield pane, env
    finally:
        pane.close()
        subprocess.run([ZUNO, "server", "stop"], env=env, capture_output=True)
        shutil.rmtree(run, ignore_errors=True)


def _served(env: dict[str, str]) -> list[str]:
    folder = Path(env["XDG_RUNTIME_DIR"]) / "zuno"
    return [
        line
        for log in folder.glob("server-*.log")
        for line in log.read_text().splitlines()
        if " served pid=" in line
    ]


def _type_zuno(pane: Pane, *args: str) -> None:
    assert args[0] in SERVED_COMMANDS
    pane.type(shlex.join([ZUNO, *args]))


def test_a_served_call_asks_on_the_terminal_and_takes_the_answer(
    served_pane: tuple[Pane, dict[str, str]], workspace: Path
) -> None:
    pane, env = served_pane
    before = len(_served(env))
    _type_zuno(pane, "call", "write", json.dumps({"path": "notes.md", "content": "hi\n"}))
    prompt = plain(pane.wait_text(ASK))
    assert "write notes.md (new file, 1 line)" in prompt
    pane.type("y")
    pane.wait_for(lambda t: plain(t).rstrip().endswith("shell$"), "the shell prompt back")
    assert (workspace / "notes.md").read_text() == "hi\n"
    served = _served(env)
    assert len(served) == before + 1 and served[-1].endswith("argv=call write"), served


def test_ctrl_c_at_a_served_prompt_ends_it_and_the_next_line_reaches_the_shell(
    served_pane: tuple[Pane, dict[str, str]], workspace: Path
) -> None:
    pane, env = served_pane
    before = len(_served(env))
    _type_zuno(pane, "call", "write", json.dumps({"path": "x.txt", "content": "x\n"}))
    pane.wait_text(ASK)
    pane.key("C-c")
    pane.wait_for(lambda t: "interrupted" in plain(t), "the interruption notice")
    pane.type("echo marker-$((6*7))")
    pane.wait_text("marker-42")
    assert pane.command() == "bash"
    assert not (workspace / "x.txt").exists()
    served = _served(env)
    assert len(served) == before + 1 and "argv=call write" in served[-1], served
