"""Without a sandbox (``sandbox.kind: none``) nothing a command started outlives its call.

Through the real ``zuno call shell``: a command starts daemons every usual way
(``setsid nohup ... &``, ``setsid -f``, a double fork, a plain ``&`` that holds
the output pipe) and prints a line. The call must return with the command's
own status (not at its deadline, whatever the daemons hold open), and no
daemon may be alive once it has. Processes are found by a marker in argv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ZUNO = str(Path(sys.executable).with_name("zuno"))


def _alive(marker: str) -> list[int]:
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry.name}/cmdline").read_bytes()
            state = Path(f"/proc/{entry.name}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in argv and state != b"Z":
            found.append(int(entry.name))
    return found


def _gone(marker: str) -> bool:
    for _ in range(200):  # the kernel may take a moment to finish a kill
        if not _alive(marker):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def marker() -> Iterator[str]:
    mark = f"zuno-none-reap-{uuid.uuid4().hex}"
    yield mark
    for pid in _alive(mark):  # leave nothing behind when the test fails
        os.kill(pid, 9)


def test_daemons_die_when_the_call_ends_and_do_not_hold_it(tmp_path: Path, marker: str) -> None:
    def sleeper(name: str) -> str:
        return f"bash -c 'exec -a {marker}-{name} sleep 1000'"

    command = (
        f"setsid nohup {sleeper('setsid-nohup')} >/dev/null 2>&1 & "
        f"setsid -f {sleeper('setsid-f')} >/dev/null 2>&1; "
        f"( ( {sleeper('double-fork')} >/dev/null 2>&1 & ) & ); "
        # Ready once every daemon is out on its own; then one that holds stdout open.
        f"until [ $(pgrep -fc {marker}) -ge 3 ]; do sleep 0.05; done; "
        f"{sleeper('holds-the-pipe')} & echo hi"
    )
    home = tmp_path / "home"
    home.mkdir()
    config = {"permission": {"mode": "permissive"}, "sandbox": {"kind": "none"}}
    (home / "zuno.json").write_text(json.dumps(config))
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {**os.environ, "ZUNO_CONFIG_HOME": str(home), "ZUNO_DB": str(tmp_path / "z.db")}
    proc = subprocess.run(
        [ZUNO, "call", "shell", json.dumps({"command": command, "timeout": 120}), "--json"],
        cwd=ws,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    result = json.loads(proc.stdout)
    assert result["data"]["sandbox"] == "none", result
    # The call ended with the shell: exit 0, not the deadline.
    assert result["data"]["exit_status"] == 0, result
    assert result["data"]["timed_out"] is False, result
    assert "hi" in result["result"], result
    assert _gone(marker), [Path(f"/proc/{p}/cmdline").read_bytes() for p in _alive(marker)]
