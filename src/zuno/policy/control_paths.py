"""Zuno's control paths: the folders outside the workspace that Zuno reads as authority.

Beside the workspace's own control files (``zuno.json``, ``.zuno/``, ``.git/``,
see :mod:`zuno.execution.sandbox.control_files`), Zuno takes orders from:

- the user's config folder: the user's ``zuno.json`` (hooks, servers, rules)
  and ``trust.json`` (which workspace files are honoured);
- the data folder: the store, the artifacts folder with every session's saved
  outputs, and the checkpoint repositories, which git runs;
- the command server's run folder (its sockets and keys);
- the workspace files a trusted ``zuno.json`` runs (hook scripts, servers),
  pinned by ``zuno trust`` (see :mod:`zuno.config.trust_pins`).

They are found once when a runtime starts, through symlinks, and then kept
out of reach wherever they lie: sandboxed commands see them read-only (the
workspace may be ``$HOME``, or the config folder a link into the workspace),
and a file tool that writes into one is always asked about.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from zuno.execution.server_launch import launch_folder
from zuno.workspace.real_paths import is_inside

__all__ = ["ControlPaths", "control_paths"]

_SCRIPT = "script a trusted zuno.json runs"

_STORE_SIBLINGS = ("-wal", "-shm", "-journal")
"""SQLite's companion files beside the store file."""


@dataclass(frozen=True, slots=True)
class ControlPaths:
    """Zuno's own folders and files, as named and as found at start.

    Attributes:
        named: Each path as Zuno names it (absolute; symlinks not followed),
            what the sandbox seals at each launch.
        real: The same paths with every symlink followed, at start.
        labels: What each path is (``config folder``, ``data folder`` ...),
            in the order of ``named``.
    """

    named: tuple[Path, ...] = ()
    real: tuple[Path, ...] = ()
    labels: tuple[str, ...] = ()

    def covers(self, path: str, workspace: Path | None = None) -> str | None:
        """The label of the control path that holds the absolute real ``path``, or None.

        A control folder that holds the whole workspace (``$ZUNO_CONFIG_HOME``
        set to a parent of it) is left out: the workspace's files are not
        Zuno's authority, and the folder's own files lie outside the
        workspace, where the write tools do not go.
        """
        root = str(workspace.resolve()) if workspace is not None else None
        for label, real in zip(self.labels, self.real, strict=True):
            if root is not None and is_inside(root, str(real)):
                continue
            if is_inside(path, str(real)):
                return label
        return None

    def inside(self, workspace: Path) -> list[str]:
        """``label (path)`` of each control path that lies in the workspace."""
        root = str(workspace.resolve())
        return [
            f"{label} ({real})"
            for label, real in zip(self.labels, self.real, strict=True)
            if is_inside(str(real), root)
        ]

    def workspace_warning(self, workspace: Path) -> str | None:
        """One line when the workspace holds any of Zuno's own folders, else None."""
        found = [f for f in self.inside(workspace) if not f.startswith(_SCRIPT)]
        if not found:
            return None
        return (
            f"the workspace {workspace.resolve()} contains Zuno's own {'; '.join(found)}: "
            "commands see them read-only and file-tool writes there always ask; "
            "a narrower workspace is safer"
        )


def run_folder() -> Path:
    """The command server's run folder (the same rule as :func:`zuno.cli.launcher.server_place`)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime, "zuno") if runtime else Path(f"/tmp/zuno-{os.getuid()}")


def control_paths(store: object | None = None, scripts: Iterable[Path] = ()) -> ControlPaths:
    """Find Zuno's control paths now, for a runtime using ``store``.

    ``scripts`` are the files a trusted workspace configuration runs.

    The user's config folder is made (mode 0700) when it is missing, so that a
    command cannot be the one to make it. The store's file and artifacts folder
    are read from ``store`` (any store type); the default data folder is added
    when it exists.
    """
    from zuno.config.paths import user_config_path

    found: list[tuple[str, Path]] = []
    config = user_config_path().parent
    with contextlib.suppress(OSError):
        config.mkdir(mode=0o700, parents=True, exist_ok=True)
    found.append(("config folder", config))
    # The folder hooks and servers start in lies in the data folder: made now, so
    # that the data folder exists, and is sealed, before any command runs.
    found.append(("data folder", launch_folder().parent))
    store_file = getattr(store, "path", None)
    if isinstance(store_file, Path):
        found.append(("store", store_file))
        found.extend(("store", store_file.with_name(store_file.name + s)) for s in _STORE_SIBLINGS)
    artifacts = getattr(store, "artifacts_root", None)
    if isinstance(artifacts, Path):
        with contextlib.suppress(OSError):
            artifacts.mkdir(mode=0o700, parents=True, exist_ok=True)
        found.append(("artifacts folder", artifacts))
    found.append(("command server folder", run_folder()))
    found.extend((_SCRIPT, path) for path in scripts)
    named: list[Path] = []
    real: list[Path] = []
    labels: list[str] = []
    for label, path in found:
        absolute = Path(os.path.abspath(path))
        if absolute in named or not os.path.lexists(absolute):
            continue
        named.append(absolute)
        real.append(absolute.resolve())
        labels.append(label)
    return ControlPaths(tuple(named), tuple(real), tuple(labels))
