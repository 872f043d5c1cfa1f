"""A one-key answer followed by Enter out of habit: the Enter leaves no mark on the screen.

The terminal echoes what is typed whenever echo is on; an Enter that arrives after the key
was read, while the model's text streams, would break that text in the middle of a word.
Here a small program asks with :func:`zuno.core.tty.ask_key`, then writes ``left`` and waits
until the test has pressed Enter, then writes ``right``: the two halves stay on one row, and
once the grace is over the terminal echoes again (a line typed at the shell is seen).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from tmux_pane import FakeModelServer, OpenPane, model_server, pane_factory, plain, tmux_needed

__all__ = ["model_server", "pane_factory"]  # fixtures, imported for pytest

_PROGRAM = """
import anyio, pathlib, sys, time
from zuno.core.tty import ask_key

async def main() -> None:
    key = await ask_key("go? [y/n] ", "yn")
    sys.stdout.write(f"got {key}; left-")
    sys.stdout.flush()
    pathlib.Path("asked").touch()
    for _ in range(900):
        if pathlib.Path("pressed").exists():
            break
        time.sleep(0.1)
    time.sleep(0.3)
    sys.stdout.write("right\\n")
    sys.stdout.flush()

anyio.run(main)
"""


@tmux_needed
def test_an_enter_after_the_key_does_not_break_the_text_that_follows(
    tmp_path: Path, model_server: FakeModelServer, pane_factory: OpenPane
) -> None:
    (tmp_path / "ask.py").write_text(_PROGRAM)
    pane = pane_factory(tmp_path, model_server)
    pane.type(shlex.join([sys.executable, "ask.py"]))
    pane.wait_text("go? [y/n]")
    pane.key("y")
    pane.wait_for(lambda _: (tmp_path / "asked").exists(), "the answer read")
    pane.key("Enter")  # out of habit, after the key was taken
    (tmp_path / "pressed").touch()
    text = plain(pane.wait_text("right"))
    assert "got y; left-right" in text, text
    pane.wait_text("shell$", count=2)
    pane.type("echo typed-at-the-shell")
    pane.wait_text("typed-at-the-shell", count=2)  # the command echoed, then its output
