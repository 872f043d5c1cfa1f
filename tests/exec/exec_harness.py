"""Shared parts of the interactive-process tests: a runtime with the exec tools on,
and processes found from outside by a unique marker in their argv."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from zuno.config.loading import Config
from zuno.policy.approvals import CallbackApprover
from zuno.session.runtime import Runtime

__all__ = [
    "EXEC_TOOLS",
    "PROMPT",
    "alive",
    "appeared",
    "exec_config",
    "exec_runtime",
    "gone",
    "new_marker",
    "sleeper",
    "with_marker",
]

EXEC_TOOLS = ("exec_command", "write_stdin", "exec_poll", "exec_kill")

PROMPT = 'read -p "Name? " name; echo "Hello, $name"; printf "%s\\n" "$name" > answer.txt'
"""A command that asks on its terminal, answers, and leaves the answer on disk."""


def exec_config(kind: str = "auto", **extra: Any) -> dict[str, Any]:
    """Configuration data with the exec tools switched on and sandbox.kind set."""
    data: dict[str, Any] = {
        "tools": dict.fromkeys(EXEC_TOOLS, True),
        "sandbox": {"kind": kind},
    }
    data.update(extra)
    return data


def exec_runtime(workspace: Path, db: Path, kind: str = "auto", **extra: Any) -> Runtime:
    """A runtime whose approver allows everything (approval is not what these test)."""
    return Runtime(
        workspace,
        config=Config.model_validate(exec_config(kind, **extra)),
        db_path=db,
        approver=CallbackApprover(lambda request: True),
    )


def new_marker() -> str:
    return f"zuno-exec-{uuid.uuid4().hex}"


def sleeper(marker: str) -> str:
    """A shell command starting a long sleep whose argv[0] is the marker."""
    return f"bash -c 'exec -a {marker} sleep 1000'"


def with_marker(marker: str, *, first: bool = False) -> list[int]:
    """Live (not zombie) processes whose argv holds marker (``first``: as argv[0])."""
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv = f.read()
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        held = argv.split(b"\0", 1)[0] == marker.encode() if first else marker.encode() in argv
        if held and state != b"Z":
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether pid is a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


def gone(marker: str) -> bool:
    """Whether no process with marker is alive, waiting a bounded while for the kernel."""
    for _ in range(200):
        if not with_marker(marker):
            return True
        time.sleep(0.05)
    return False


def appeared(marker: str, tries: int = 600) -> bool:
    """Whether a process whose argv[0] is marker shows up within a bounded wait."""
    for _ in range(tries):
        if with_marker(marker, first=True):
            return True
        time.sleep(0.05)
    return False
