"""The live view shows what matters, once, in the person's words (a real terminal, tmux).

- an interactive process's output (exec_command, write_stdin) is on screen;
- a read says its path and the lines read; a todo update lists its items with their states
  (and is not asked about);
- a change shown in an approval prompt is not shown again after the call;
- notes written for the model (``[Zuno: ...]``, "Do not retry ...") never reach the screen;
- a denial is broken between words at the screen's edge, never inside one.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tmux_pane import (
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


def _call(call_id: str, tool: str, **arguments: object) -> Reply:
    return Reply(tool_calls=[(call_id, tool, json.dumps(arguments))])


def _exec_tools() -> None:
    """The interactive-process tools on, in the user's own file (the tests' config home)."""
    tools = ["exec_command", "write_stdin", "exec_poll", "exec_kill"]
    user = Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"
    user.write_text(json.dumps({"tools": dict.fromkeys(tools, True)}))


def _done(pane: Pane, answer: str) -> str:
    pane.wait_text(answer)
    return plain(pane.wait_for(lambda t: plain(t).rstrip().endswith("shell$"), "the shell"))


def test_an_interactive_process_output_shows_and_typing_asks_once(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    _exec_tools()
    asks = 'read -p "Name? " n; echo "Hello, $n"; read -p "Again? " m; echo "Bye, $m"'
    model_server.enqueue(
        _call("c1", "exec_command", command=asks, yield_ms=3000),
        _call("c2", "write_stdin", session=1, chars="Ada\n", yield_ms=3000),
        _call("c3", "write_stdin", session=1, chars="Bob\n", yield_ms=3000),
        Reply(text="Greeted."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "greet", "--model", MODEL)
    pane.wait_text("allow?")
    pane.type("y")
    pane.wait_text("allow?", count=2)
    pane.type("y")
    shown = _done(pane, "Greeted.")
    assert "Name?" in shown and "Hello, Ada" in shown and "Bye, Bob" in shown
    assert shown.count("allow?") == 2  # the command, then the first keystrokes only
    assert 'type "Ada\\n" into process 1' in shown  # the call in words, not its JSON


def test_read_says_its_lines_and_a_todo_update_its_items_unasked(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    (workspace / "notes.md").write_text("".join(f"note {n}\n" for n in range(1, 8)))
    todos = [
        {"id": "a", "content": "read the notes", "status": "completed"},
        {"id": "b", "content": "fix the test", "status": "in_progress"},
    ]
    model_server.enqueue(
        _call("c1", "read", path="notes.md", offset=2, limit=3),
        _call("c2", "todo_update", todos=todos),
        Reply(text="Planned."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "plan it", "--model", MODEL)
    shown = _done(pane, "Planned.")
    assert "notes.md: lines 2-4 of 7" in shown
    assert "note 2" not in shown  # the file's text is for the model
    assert "[completed] (id a) read the notes" in shown
    assert "[in_progress] (id b) fix the test" in shown
    assert "allow?" not in shown


_OLD = re.compile(r"-old line")


def test_a_diff_shown_at_the_approval_is_not_shown_again(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    (workspace / "notes.md").write_text("old line\nkeep\n")
    model_server.enqueue(
        _call("c0", "read", path="notes.md"),
        _call("c1", "write", path="notes.md", content="new line\nkeep\n"),
        Reply(text="Rewritten."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "rewrite notes", "--model", MODEL)
    pane.wait_text("allow?")
    pane.type("y")
    shown = _done(pane, "Rewritten.")
    assert (workspace / "notes.md").read_text() == "new line\nkeep\n"
    assert len(_OLD.findall(shown)) == 1, shown


def test_notes_for_the_model_stay_off_the_screen_and_denials_wrap_between_words(
    workspace: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    (workspace / "state.txt").write_text("looked at\n")
    model_server.enqueue(
        # A Never call that fails: its result carries a note for the model ("[Zuno: ...]").
        _call("c1", "shell", command="echo failing-$((1+1)); sleep 60", timeout=1),
        _call("c1b", "read", path="state.txt"),  # the inspection the note asks for
        _call("c2", "shell", command="touch denied-file-with-a-long-name-to-wrap"),
        Reply(text="Stopped."),
    )
    pane = pane_factory(workspace, model_server)
    pane.zuno("run", "try things", "--model", MODEL)
    pane.wait_text("allow?")
    pane.type("y")
    pane.wait_text("allow?", count=2)
    pane.resize(50)
    pane.type("n")
    shown = _done(pane, "Stopped.")
    assert "failing-2" in shown and "timed out" in shown
    for banner in ("[Zuno:", "will not be run again", "Do not retry"):
        assert banner not in shown
    # The pane's rows as drawn (not joined): the denial is cut between words only.
    rows = plain(pane.rows()).splitlines()
    start = max(i for i, row in enumerate(rows) if "blocked: denied" in row)
    joined = " ".join(" ".join(row.strip() for row in rows[start : start + 6]).split())
    said = "needed approval (strict mode: side_effecting calls need approval) and the user denied"
    assert said in joined, rows[start : start + 6]
