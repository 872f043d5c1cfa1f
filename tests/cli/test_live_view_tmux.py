"""The live view of ``zuno run`` as a person sees it: a real terminal (tmux), read back.

Each test types ``zuno run`` at a bash prompt in its own tmux server, against the scripted model
server, and reads the pane as a person would: the elapsed time of a running command and its
output while it runs, coloured diffs, and Ctrl-C at a prompt giving the shell back.
Commands that must stay running wait for a file the test creates, so nothing depends on timing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

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


_RUNNING = re.compile(r"running ([0-9]+)s")


def _shell(call_id: str, **arguments: object) -> tuple[str, str, str]:
    return (call_id, "shell", json.dumps(arguments))


def _ticked(text: str) -> bool:
    """A running call shows an elapsed time of at least one second (so the clock moves)."""
    return any(int(n) >= 1 for n in _RUNNING.findall(plain(text)))


def test_slow_shell_shows_elapsed_time_and_its_output_while_it_runs(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    command = f"echo stream-$((0+1)); echo stream-$((1+1)); {HOLD}; echo after-$((2+1))"
    model_server.enqueue(Reply(tool_calls=[_shell("c1", command=command)]), Reply(text="All done."))
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "run the slow thing", "--model", MODEL)
    pane.wait_text("allow?")
    pane.type("y")
    # While the command waits for "release": its output so far and a clock that moves.
    seen = pane.wait_for(
        lambda t: "stream-2" in plain(t) and _ticked(t),
        "the command's output and its elapsed time while it runs",
    )
    assert "after-3" not in plain(seen) and "All done." not in plain(seen)
    (workspace / "release").touch()
    done = plain(pane.wait_text("All done."))
    assert "exit code 0" in done and "after-3" in done
    # The running line is gone once the call settled: the last screen has no clock.
    pane.wait_for(lambda t: plain(t).rstrip().endswith("shell$"), "the shell prompt back")
    tail = plain(pane.screen()).split("All done.")[-1]
    assert not _RUNNING.search(tail)


def test_background_job_output_shows_while_the_run_waits_for_it(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    command = f"echo job-line-$((0+1)); {HOLD}; echo job-line-$((1+1))"
    model_server.enqueue(
        Reply(tool_calls=[_shell("c1", command=command, background=True)]),
        Reply(text="Started it."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "start the watcher", "--model", MODEL)
    pane.wait_text("allow?")
    pane.type("y")
    seen = pane.wait_for(
        lambda t: (
            "job-line-1" in plain(t)
            and "Started it." in plain(t)
            and _ticked(plain(t).split("Started it.")[-1])
        ),
        "the job's output and elapsed time after the answer",
    )
    assert "job-line-2" not in plain(seen)
    (workspace / "release").touch()
    pane.wait_text("job-line-2")
    pane.wait_for(lambda t: plain(t).rstrip().endswith("shell$"), "the shell prompt back")


_RED = re.compile(r"\x1b\[[0-9;]*31m\s*-old line")
_GREEN = re.compile(r"\x1b\[[0-9;]*32m\s*\+new line")


def test_approval_shows_a_coloured_diff_and_the_result_does_not_repeat_it(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    (workspace / "notes.md").write_text("old line\nkeep\n")
    model_server.enqueue(
        # A file is replaced only after this session has read it (edits that cannot clobber).
        Reply(tool_calls=[("c0", "read", json.dumps({"path": "notes.md"}))]),
        Reply(
            tool_calls=[
                ("c1", "write", json.dumps({"path": "notes.md", "content": "new line\nkeep\n"}))
            ]
        ),
        Reply(text="Rewritten."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "rewrite notes", "--model", MODEL)
    prompt = pane.wait_for(lambda t: "allow?" in plain(t), "the approval", colours=True)
    assert _RED.search(prompt) and _GREEN.search(prompt), prompt
    pane.type("y")
    shown = pane.wait_for(lambda t: "Rewritten." in plain(t), "the answer", colours=True)
    assert (workspace / "notes.md").read_text() == "new line\nkeep\n"
    result = shown.split("allow?")[-1]
    assert not _RED.search(result), result  # shown once, at the prompt


def test_an_edit_not_asked_about_shows_its_coloured_diff_after_it_ran(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    (workspace / "notes.md").write_text("old line\nkeep\n")
    model_server.enqueue(
        Reply(tool_calls=[("c0", "read", json.dumps({"path": "notes.md"}))]),
        Reply(
            tool_calls=[
                ("c1", "write", json.dumps({"path": "notes.md", "content": "new line\nkeep\n"}))
            ]
        ),
        Reply(text="Rewritten."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "rewrite notes", "--model", MODEL, "--mode", "accept-edits")
    shown = pane.wait_for(lambda t: "Rewritten." in plain(t), "the answer", colours=True)
    assert "allow?" not in plain(shown)
    assert _RED.search(shown) and _GREEN.search(shown), shown


def _interrupt_at_prompt(pane: Pane, prompt: str) -> None:
    pane.wait_text(prompt)
    pane.key("C-c")
    pane.wait_for(lambda t: "interrupted" in plain(t), "the interruption notice")
    # The process is gone: the shell has the terminal again and runs the next line typed.
    pane.type("echo marker-$((6*7))")
    pane.wait_text("marker-42")
    assert pane.command() == "bash"


def test_ctrl_c_at_an_approval_prompt_ends_the_process(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    model_server.enqueue(
        Reply(tool_calls=[("c1", "write", json.dumps({"path": "x.txt", "content": "x\n"}))]),
        Reply(text="never asked for"),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "write x", "--model", MODEL)
    _interrupt_at_prompt(pane, "allow?")
    assert not (workspace / "x.txt").exists()
    assert model_server.remaining == 1


def test_ctrl_c_at_a_question_prompt_ends_the_process(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    question = {"questions": [{"header": "Style", "question": "Tabs or spaces?"}]}
    model_server.enqueue(
        Reply(tool_calls=[("c1", "question", json.dumps(question))]),
        Reply(text="never asked for"),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "ask me", "--model", MODEL)
    _interrupt_at_prompt(pane, "Answer with")
    assert model_server.remaining == 1
