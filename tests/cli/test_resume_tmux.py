"""``zuno resume`` from another folder, as a person types it at a real terminal (tmux)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from tmux_pane import (
    MODEL,
    FakeModelServer,
    Pane,
    Reply,
    model_server,  # noqa: F401  (a fixture)
    pane_factory,  # noqa: F401  (a fixture)
    plain,
    tmux_needed,
)

pytestmark = tmux_needed


def _session(screen: str) -> str:
    found = re.findall(r"Session (ses_\w+)", plain(screen))
    assert found, plain(screen)
    return found[-1]


def test_resume_typed_in_another_folder_writes_in_the_sessions_folder(
    tmp_path: Path,
    model_server: FakeModelServer,  # noqa: F811
    pane_factory: Callable[[Path, FakeModelServer], Pane],  # noqa: F811
) -> None:
    home, elsewhere, moved = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "moved"
    for folder in (home, elsewhere, moved):
        folder.mkdir()
    pane = pane_factory(home, model_server)
    model_server.enqueue(
        Reply(tool_calls=[("c1", "write", '{"path": "one.txt", "content": "1\\n"}')])
    )
    pane.zuno("run", "write the files", "--model", MODEL, "--yes", "--max-steps", "1")
    session = _session(pane.wait_text("zuno resume ses_"))
    assert (home / "one.txt").is_file()

    pane.type(f"cd {elsewhere}")
    model_server.enqueue(
        Reply(tool_calls=[("c2", "write", '{"path": "two.txt", "content": "2\\n"}')]),
        Reply(text="Both files are written."),
    )
    pane.zuno("resume", session, "--yes")  # on a terminal: the turn ends, then the chat waits
    pane.wait_text("done in")
    assert (home / "two.txt").read_text() == "2\n"
    assert not (elsewhere / "two.txt").exists()
    pane.key("C-d")
    pane.wait_text("is saved", count=2)

    # Moving is explicit, shown to the person, and the model hears of it.
    model_server.enqueue(
        Reply(tool_calls=[("c3", "write", '{"path": "three.txt", "content": "3\\n"}')]),
        Reply(text="Written in the new folder."),
    )
    pane.zuno("resume", session, "carry on here", "--yes", "--move-to", str(moved))
    screen = plain(pane.wait_text("done in", count=2))
    assert f"now works in {moved}" in screen.replace("\n", "")
    assert (moved / "three.txt").read_text() == "3\n"
    assert not (home / "three.txt").exists() and not (elsewhere / "three.txt").exists()
    told = model_server.requests[-2].body["messages"][-1]
    assert told["role"] == "user" and str(moved) in told["content"]
    assert "carry on here" in told["content"]
