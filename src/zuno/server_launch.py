"""Where and how Zuno starts the programs a configuration names: hooks, MCP and language servers.

A user's own hook or server must not run the workspace's code by accident.
Started with the workspace as their folder, ``python -m NAME`` imports a
``NAME.py`` the repository ships, and ``npx NAME`` runs the repository's
``node_modules/.bin/NAME``. So the programs of the user's configuration (and
Zuno's built-in language servers) start:

- in a folder of Zuno's own (:func:`launch_folder`, empty, in the data folder,
  which commands cannot write);
- with ``ZUNO_WORKSPACE`` set to the workspace (the documented way to find it);
- with ``PYTHONSAFEPATH=1`` (Python adds neither the folder nor a script's
  folder to ``sys.path``);
- with a ``PATH`` that holds neither a relative entry (``.``, an empty one),
  nor the workspace or anything in it, nor any ``node_modules/.bin``; their
  program is looked up on that ``PATH``.

The entries of a workspace ``zuno.json`` the user trusted are the workspace's
own: they start in the workspace as before (``./scripts/hook.sh``), and
``zuno trust`` pins the files they run (see :mod:`zuno.trust_pins`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

__all__ = [
    "WORKSPACE_VARIABLE",
    "Launch",
    "launch_folder",
    "safe_path",
    "server_launch",
]

WORKSPACE_VARIABLE = "ZUNO_WORKSPACE"
"""The environment variable that tells a hook or server which workspace it serves."""


def launch_folder() -> Path:
    """An empty folder of Zuno's own to start programs in (made, mode 0700, when missing)."""
    folder = Path(platformdirs.user_data_dir("zuno")) / "launch"
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def _unsafe(entry: str, workspace: str) -> bool:
    if not entry.startswith("/"):
        return True  # "", "." or a relative folder: the current folder's programs
    real = os.path.realpath(entry)
    if real == workspace or real.startswith(workspace.rstrip("/") + "/"):
        return True
    return "node_modules/.bin" in os.path.normpath(entry) + "/"


def safe_path(path: str, workspace: Path) -> str:
    """``path`` (a ``PATH`` value) without the entries through which workspace code would run."""
    root = os.path.realpath(workspace)
    return os.pathsep.join(e for e in path.split(os.pathsep) if not _unsafe(e, root))


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start one configured program.

    Attributes:
        argv: The argv, its program resolved to a path when found.
        cwd: The folder it starts in.
        env: Its whole environment.
    """

    argv: list[str]
    cwd: Path
    env: dict[str, str]


def server_launch(
    argv: list[str],
    workspace: Path,
    env: Mapping[str, str],
    *,
    from_workspace: bool = False,
    cwd: Path | None = None,
) -> Launch:
    """The launch of a configured program in ``workspace``.

    Args:
        argv: The program and its arguments as configured.
        workspace: The workspace it serves (``ZUNO_WORKSPACE``).
        env: The environment it would get; ``PATH`` is cleaned, the others added.
        from_workspace: The entry comes from the workspace's trusted
            ``zuno.json``: it starts in the workspace, as its own scripts expect.
        cwd: A folder the configuration named explicitly (it wins).
    """
    started = dict(env)
    started[WORKSPACE_VARIABLE] = str(workspace)
    if from_workspace:
        return Launch(list(argv), cwd or workspace, started)
    started["PATH"] = safe_path(started.get("PATH", os.defpath), workspace)
    started["PYTHONSAFEPATH"] = "1"
    program = argv[0] if argv else ""
    if program and "/" not in program:
        found = shutil.which(program, path=started["PATH"])
        if found is not None:
            program = found
    return Launch([program, *argv[1:]], cwd or launch_folder(), started)
