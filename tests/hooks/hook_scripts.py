"""Hook commands for the hook tests: small Python scripts run as commands."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

__all__ = ["hook_command", "logging_hook", "read_log"]


def hook_command(folder: Path, name: str, body: str, **settings: Any) -> dict[str, Any]:
    """A ``hooks.*`` entry that runs ``body`` (Python, the call's JSON on stdin) as a command."""
    path = folder / f"{name}.py"
    path.write_text("import json, sys\n" + textwrap.dedent(body))
    return {"command": f"{sys.executable} {path}", **settings}


def logging_hook(folder: Path, log: Path, **settings: Any) -> dict[str, Any]:
    """A hook that appends what it was told to ``log`` (one JSON line) and answers nothing.

    It runs unconfined (``"sandbox": false``, the user's own opt-out) unless the
    settings say otherwise: the log may lie outside the workspace.
    """
    settings.setdefault("sandbox", False)
    body = f"""
    payload = sys.stdin.read()
    with open({str(log)!r}, "a") as f:
        f.write(payload.strip() + "\\n")
    """
    return hook_command(folder, f"log_{log.stem}", body, **settings)


def read_log(log: Path) -> list[dict[str, Any]]:
    """The payloads a logging hook received, in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
