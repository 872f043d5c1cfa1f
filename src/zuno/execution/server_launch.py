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
``zuno trust`` pins the files they run (see :mod:`zuno.config.trust_pins`).

Every such program also runs confined by default (:func:`confined`): under
the same sandbox as ``shell`` (``sandbox.kind`` and ``sandbox.mode``), without
the variables ``sandbox.env_remove`` withholds (only what the entry's own
``env`` names explicitly is added back), and with the network only when the
entry says ``"network": true``. An entry of the user's own file may opt out
with ``"sandbox": false``; an entry of a workspace file cannot.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
from collections.abc import Generator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

if TYPE_CHECKING:
    from zuno.config.sandbox import SandboxSettings

__all__ = [
    "WORKSPACE_VARIABLE",
    "Launch",
    "confined",
    "find_program",
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


def find_program(program: str, workspace: Path | None = None) -> str | None:
    """Where ``program`` is: as given when it has a slash, else next to Python, else on PATH.

    The ``PATH`` searched leaves out what would run the workspace's own code
    (relative entries, the workspace, ``node_modules/.bin``: see :func:`safe_path`);
    workspace defaults to the current folder.
    """
    if os.sep in program or (os.altsep and os.altsep in program):
        path = Path(program).expanduser()
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    beside = Path(sys.executable).parent / program
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    path = safe_path(os.environ.get("PATH", os.defpath), workspace or Path.cwd())
    return shutil.which(program, path=path)


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


@contextmanager
def confined(
    launch: Launch,
    settings: SandboxSettings,
    *,
    workspace: Path,
    network: bool,
    protected: Sequence[Path] = (),
    explicit_env: Mapping[str, str] | None = None,
) -> Generator[Launch]:
    """The launch wrapped in the sandbox commands run under, for as long as it is open.

    Args:
        launch: The program's launch (see :func:`server_launch`).
        settings: The ``sandbox`` settings of the configuration.
        workspace: The workspace (writable as for commands).
        network: Whether this program may use the network (its own setting).
        protected: Zuno's own folders (see :mod:`zuno.policy.control_paths`).
        explicit_env: Variables the entry names itself; kept even when their
            name looks like a secret (the user gave them to this program).

    Raises:
        FileNotFoundError: The program is not there (not found on ``PATH``).
        zuno.execution.sandbox.SandboxError: The sandbox cannot start here.
    """
    from zuno.execution.sandbox.environment import command_environment
    from zuno.execution.sandbox.policy import prepared_launch
    from zuno.execution.sandbox.selection import policy_for, select_sandbox

    program = launch.argv[0] if launch.argv else ""
    where = launch.cwd / program if "/" in program else None
    found = (where is not None and where.is_file() and os.access(where, os.X_OK)) or shutil.which(
        program, path=launch.env.get("PATH", os.defpath)
    ) is not None
    if not found:
        # Said here, as it would be without the sandbox: inside, only the sandbox's
        # own "execvp" complaint would reach the program's stderr.
        raise FileNotFoundError(errno.ENOENT, f"{program}: not found", program)
    chosen = settings.model_copy(update={"network": network})
    sandbox = select_sandbox(chosen)
    policy = policy_for(chosen, workspace, protected=protected)
    env = {
        **command_environment(chosen.env_remove, launch.env, keep=chosen.env_keep),
        **(explicit_env or {}),
    }
    with prepared_launch(sandbox, launch.argv, policy, cwd=launch.cwd, env=env) as wrapped:
        yield Launch(list(wrapped.argv), wrapped.cwd, dict(wrapped.env))
