"""A Zuno killed outright (SIGKILL) takes the commands it started with it, under every sandbox.

No cleanup of Zuno's own can run after SIGKILL: only the kernel can end the
command, through a parent-death signal (bubblewrap's ``--die-with-parent``, the
Landlock helper's and the unsandboxed guard's ``PR_SET_PDEATHSIG``). A command
that outlived its Zuno would go on changing the workspace while the store says
the call is over (``uncertain``). Processes are found from outside by a unique
argv[0]; waits are bounded polls, never timings.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ZUNO = [sys.executable, "-m", "zuno"]
KINDS = [
    pytest.param({"kind": "bubblewrap"}, id="bubblewrap"),
    pytest.param({"kind": "landlock"}, id="landlock"),
    pytest.param({"kind": "none", "mode": "full-access"}, id="none"),
]


def _marked(marker: str) -> list[int]:
    """Live processes whose argv[0] is the marker."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0]
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if argv0 == marker.encode() and state != b"Z":
            found.append(int(entry.name))
    return found


def _poll(check: object, tries: int = 600) -> bool:
    for _ in range(tries):
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("sandbox", KINDS)
@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_a_command_dies_with_a_killed_zuno(
    sandbox: dict[str, str], background: bool, workspace: Path, tmp_path: Path
) -> None:
    marker = f"zuno-orphan-{uuid.uuid4().hex}"
    config = Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"
    config.write_text(json.dumps({"sandbox": sandbox, "permission": {"mode": "permissive"}}))
    # nohup and a new session: neither a hangup nor a process-group kill would end it.
    command = f"nohup setsid bash -c 'exec -a {marker} sleep 1000' >/dev/null 2>&1 &\nwait"
    args = {"command": command, "timeout": 600}
    if background:
        args = {"command": f"exec -a {marker} sleep 1000", "background": True}
    zuno = subprocess.Popen(
        [*ZUNO, "call", "shell", json.dumps(args), "--yes"],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(tmp_path / "z.db")},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert _poll(lambda: _marked(marker)), "the command never started"
    finally:
        zuno.send_signal(signal.SIGKILL)
        zuno.wait(timeout=60)
    survivors = _marked(marker)
    try:
        assert _poll(lambda: not _marked(marker), tries=200), f"still running: {survivors}"
    finally:
        for pid in _marked(marker):
            os.kill(pid, signal.SIGKILL)
