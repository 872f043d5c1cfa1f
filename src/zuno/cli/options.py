"""The options many commands share: workspace, store, JSON output, approvals, session, mode.

Each is an ``Annotated`` type a command's parameter takes, so that ``--db`` or
``--mode`` reads and checks the same everywhere. Nothing here imports the
runtime: ``zuno --help`` builds these without loading a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = [
    "MODE_NAMES",
    "AgentOpt",
    "AllOpt",
    "Db",
    "Json",
    "ModeOpt",
    "NewSession",
    "SessionOpt",
    "StreamOpt",
    "WaitOpt",
    "Workspace",
    "Yes",
    "check_mode_name",
]


Workspace = Annotated[
    Path,
    typer.Option("--workspace", "-w", help="The workspace folder (default: the current folder)."),
]


Db = Annotated[
    Path | None,
    typer.Option(
        "--db",
        help="The store: a SQLite file, or postgresql://USER@HOST/DB "
        "(default: $ZUNO_DB, else zuno.db in the data folder).",
    ),
]


Json = Annotated[bool, typer.Option("--json", help="Print JSON for programs.")]


Yes = Annotated[bool, typer.Option("--yes", "-y", help="Approve what strict mode would ask.")]


SessionOpt = Annotated[
    str | None,
    typer.Option(
        "--session",
        "-s",
        help="Append to this session (default: the workspace's session of direct calls).",
    ),
]


NewSession = Annotated[
    bool,
    typer.Option("--new-session", help="Start a new session of direct calls for this workspace."),
]


WaitOpt = Annotated[
    float,
    typer.Option(
        "--wait",
        min=0,
        metavar="SECONDS",
        help="If another live process holds the session, wait up to SECONDS for it "
        "(default: refuse at once).",
    ),
]


StreamOpt = Annotated[
    bool,
    typer.Option(
        "--stream",
        help="Copy a running command's output to stderr as it comes (the result printed "
        "at the end stays the bounded one).",
    ),
]


AgentOpt = Annotated[str, typer.Option("--agent", "-a", help="The agent whose tools are active.")]


MODE_NAMES = ("plan", "accept-edits", "strict", "permissive")
"""The permission modes (zuno.policy.permissions.MODES, named here so that --help imports no
models).
"""


def check_mode_name(value: str | None) -> str | None:
    """A ``--mode`` value, refused with the list of modes when it is none of them."""
    if value is not None and value not in MODE_NAMES:
        raise typer.BadParameter(f"{value!r} is not a mode; choose {', '.join(MODE_NAMES)}")
    return value


ModeOpt = Annotated[
    str | None,
    typer.Option(
        "--mode",
        callback=check_mode_name,
        metavar="MODE",
        help="The permission mode: plan (reads, questions and plan updates only), "
        "accept-edits (file edits in the workspace unasked), strict, permissive. "
        "Default: the session's stored mode, else permission.mode of zuno.json.",
    ),
]


AllOpt = Annotated[bool, typer.Option("--all", help="Every workspace's sessions.")]
