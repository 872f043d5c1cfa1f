"""The real ``zuno`` command from any folder, against one store and the scripted model server.

Shared by the tests of ``resume``, ``show`` and ``sessions`` (tests/cli/test_resume_show_truth.py,
tests/cli/test_sessions_listing.py). The scripted server lives in tests/agent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))

from fake_api import FakeModelServer, Reply

__all__ = ["MODEL", "ZUNO", "FakeModelServer", "Reply", "Zuno", "session_from"]

ZUNO = [sys.executable, "-m", "zuno"]
MODEL = "openai:fake-model"


class Zuno:
    """Runs ``zuno`` as a user does: a real process, stdin not a terminal."""

    def __init__(self, db: Path, server: FakeModelServer | None = None) -> None:
        self.env = {**os.environ, "ZUNO_DB": str(db)}
        if server is not None:
            self.env["OPENAI_BASE_URL"] = server.openai_base_url
            self.env["OPENAI_API_KEY"] = "sk-test"

    def run(self, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*ZUNO, *args],
            cwd=cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def ok(self, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        proc = self.run(cwd, *args)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        return proc

    def json(self, cwd: Path, *args: str) -> Any:
        return json.loads(self.ok(cwd, *args, "--json").stdout)


def session_from(stderr: str) -> str:
    """The session id a run or resume names in its summary."""
    match = re.search(r"[Ss]ession (ses_\w+)", stderr)
    assert match, stderr
    return match.group(1)
