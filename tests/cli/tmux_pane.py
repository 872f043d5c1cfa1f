"""A person at a real terminal: a bash shell in a tmux pane, typed into and read back.

Shared by tests/cli/test_live_view_tmux.py and tests/cli/test_prompts_plain.py. Each pane has
its own tmux server (its own socket in the test's folder), so tests never see each other.
The scripted model server lives in tests/agent.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))

from fake_api import FakeModelServer, Reply

__all__ = [
    "HOLD",
    "MODEL",
    "FakeModelServer",
    "OpenPane",
    "Pane",
    "Reply",
    "model_server",
    "pane_factory",
    "plain",
    "tmux_needed",
]

MODEL = "openai:fake-model"
HOLD = "for i in $(seq 900); do [ -e release ] && break; sleep 0.1; done"
"""A shell loop that waits for the file ``release`` (at most 90 s, so a failing test ends)."""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")
_WAIT_S = float(os.environ.get("ZUNO_TEST_PANE_WAIT", "90"))
"""How long a wait may poll before the test fails (a bound, never a measured duration)."""

tmux_needed = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (apt-get install -y tmux)"
)


def plain(text: str) -> str:
    """Pane text without colour codes."""
    return _ANSI.sub("", text)


class Pane:
    """An interactive bash in a detached tmux session of its own."""

    def __init__(self, folder: Path, cwd: Path, env: dict[str, str]) -> None:
        self._socket = str(folder / "tmux.sock")
        self.cwd = cwd
        self.env = {
            k: v for k, v in env.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TMUX", "COLUMNS")
        }
        self._tmux(
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "200",
            "-y",
            "50",
            "-c",
            str(cwd),
            "env PS1='shell$ ' bash --norc --noprofile",
        )
        self._tmux("set-option", "-g", "history-limit", "5000")
        self.wait_for(lambda text: "shell$" in text, "the shell prompt")

    def _tmux(self, *args: str) -> str:
        proc = subprocess.run(
            ["tmux", "-S", self._socket, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def type(self, line: str) -> None:
        """Type a line and press Enter."""
        self._tmux("send-keys", "-t", "t", "-l", line)
        self._tmux("send-keys", "-t", "t", "Enter")

    def key(self, name: str) -> None:
        """Press one key (``C-c``, ``Enter``)."""
        self._tmux("send-keys", "-t", "t", name)

    def zuno(self, *args: str) -> None:
        """Start ``zuno ARGS`` at the shell prompt."""
        self.type(shlex.join([sys.executable, "-m", "zuno", *args]))

    def screen(self, colours: bool = False) -> str:
        """The pane and its history; with colours, as SGR escape codes."""
        flags = ["-p", "-J", "-S", "-3000"] + (["-e"] if colours else [])
        return self._tmux("capture-pane", "-t", "t", *flags)

    def rows(self) -> str:
        """The pane's rows as drawn: a line the terminal wrapped stays two rows."""
        return self._tmux("capture-pane", "-t", "t", "-p", "-S", "-3000")

    def resize(self, width: int) -> None:
        """Make the terminal ``width`` columns wide."""
        self._tmux("resize-window", "-t", "t", "-x", str(width))

    def command(self) -> str:
        """The program in the pane's foreground."""
        return self._tmux("display-message", "-p", "-t", "t", "#{pane_current_command}").strip()

    def wait_for(self, ready: Callable[[str], bool], what: str, *, colours: bool = False) -> str:
        """Poll the pane until ``ready(text)`` holds; fail with the pane when it never does."""
        deadline = time.monotonic() + _WAIT_S
        text = ""
        while time.monotonic() < deadline:
            text = self.screen(colours)
            if ready(text):
                return text
            time.sleep(0.1)
        pytest.fail(f"the pane never showed {what}:\n{plain(text)}")

    def wait_text(self, needle: str, count: int = 1) -> str:
        """Poll until ``needle`` appears ``count`` times (colours removed)."""
        return self.wait_for(lambda t: plain(t).count(needle) >= count, repr(needle))

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self._socket, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    """A running scripted model server (``enqueue`` replies)."""
    with FakeModelServer() as server:
        yield server


OpenPane = Callable[[Path, FakeModelServer], Pane]
"""What ``pane_factory`` gives: a pane opened in a workspace against a model server."""


@pytest.fixture
def pane_factory(tmp_path: Path) -> Iterator[OpenPane]:
    """Opens panes whose shell talks to a scripted model server; all closed at the end."""
    opened: list[Pane] = []

    def open_pane(cwd: Path, server: FakeModelServer) -> Pane:
        env = {
            **os.environ,
            "ZUNO_DB": str(tmp_path / "zuno.db"),
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": "sk-test",
        }
        folder = tmp_path / f"tmux{len(opened)}"
        folder.mkdir()
        pane = Pane(folder, cwd, env)
        opened.append(pane)
        return pane

    yield open_pane
    for pane in opened:
        pane.close()
