"""How checkpoints run git: nothing of the user's setup, and no code from the store.

The shadow store lies in Zuno's data folder, which a command may reach when
the workspace contains it (issue: a workspace that is the home folder). Git
runs code named by a repository's config (``core.fsmonitor``, hooks such as
``post-index-change``, filters, ``diff.external``, pagers, helpers), so every
git call here:

- reads no system or global config (``GIT_CONFIG_NOSYSTEM``,
  ``GIT_CONFIG_GLOBAL=/dev/null``) and no ``GIT_*`` variable of the caller;
- overrides, with ``-c`` on the command line (which beats every config file),
  each setting that names a program or a hook folder (:data:`GUARDS`);
- and runs only on a store whose config, attributes and layout are exactly what
  Zuno wrote (:func:`store_is_intact`); any other is removed and created again.

The store is private: folders 0700, files 0600 (objects 0400), whatever the umask.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

__all__ = [
    "GUARDS",
    "StoreLayout",
    "create_store",
    "git_command",
    "git_env",
    "make_private",
    "store_is_intact",
    "write_private",
]

GUARDS: tuple[str, ...] = tuple(
    arg
    for setting in (
        "safe.directory=*",
        "core.fsmonitor=false",
        f"core.hooksPath={os.devnull}",
        f"core.attributesFile={os.devnull}",
        f"core.excludesFile={os.devnull}",
        "core.sshCommand=false",
        "core.gitProxy=",
        "core.askPass=false",
        "core.pager=cat",
        "core.editor=false",
        "sequence.editor=false",
        "core.alternateRefsCommand=false",
        "core.sharedRepository=0600",
        "diff.external=",
        "credential.helper=",
        "commit.gpgSign=false",
        "gpg.program=false",
        "protocol.allow=never",
        "submodule.recurse=false",
        "maintenance.auto=false",
        "gc.auto=0",
    )
    for arg in ("-c", setting)
)
"""``-c`` settings on every git call: each one that could name a program or hooks is neutral."""


def git_command(*args: str) -> list[str]:
    """The argument vector of one guarded git call."""
    return ["git", *GUARDS, *args]


def git_env(git_dir: Path | None, workspace: Path | None) -> dict[str, str]:
    """The environment of a git call: the caller's without ``GIT_*``, no user config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        LC_ALL="C",
    )
    if git_dir is not None and workspace is not None:
        env.update(
            GIT_DIR=str(git_dir),
            GIT_WORK_TREE=str(workspace),
            GIT_INDEX_FILE=str(git_dir / "index"),
        )
    return env


class StoreLayout:
    """The files Zuno writes into a new store, byte for byte."""

    def __init__(self, config: str, attributes: str, head: str, workspace: Path) -> None:
        """Keep what :func:`create_store` writes and :func:`store_is_intact` expects."""
        self.config = config
        self.attributes = attributes
        self.head = head
        self.workspace = str(workspace) + "\n"


# Files or folders that git would follow to other objects, configs or code.
_FOREIGN = (
    "config.worktree",
    "commondir",
    "gitdir",
    "objects/info/alternates",
    "objects/info/http-alternates",
    "info/grafts",
    "shallow",
    "modules",
    "worktrees",
)


def store_is_intact(git_dir: Path, layout: StoreLayout) -> bool:
    """Whether ``git_dir`` holds exactly the config and attributes Zuno wrote, and no hooks."""
    try:
        if (git_dir / "config").read_text() != layout.config:
            return False
        if (git_dir / "info" / "attributes").read_text() != layout.attributes:
            return False
        if (git_dir / "HEAD").read_text() != layout.head:
            return False
        hooks = git_dir / "hooks"
        if os.path.lexists(hooks) and (not hooks.is_dir() or any(hooks.iterdir())):
            return False
    except (OSError, UnicodeDecodeError):
        return False
    return not any(os.path.lexists(git_dir / name) for name in _FOREIGN)


def create_store(git_dir: Path, layout: StoreLayout) -> None:
    """Create (or, when one is there, first remove) the store at ``git_dir``, private.

    Raises:
        OSError: The folder cannot be made.
        subprocess.CalledProcessError: ``git init`` failed.
    """
    if os.path.lexists(git_dir):
        if git_dir.is_symlink() or not git_dir.is_dir():
            git_dir.unlink()
        else:
            shutil.rmtree(git_dir)
    parent = git_dir.parent
    parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(OSError):
        os.chmod(parent, 0o700)
    git_dir.mkdir(mode=0o700)
    subprocess.run(
        git_command("init", "--quiet", "--bare", "--template=", str(git_dir)),
        capture_output=True,
        env=git_env(None, None),
        timeout=60,
        check=True,
    )
    write_private(git_dir / "config", layout.config)
    (git_dir / "info").mkdir(mode=0o700, exist_ok=True)
    write_private(git_dir / "info" / "attributes", layout.attributes)
    write_private(git_dir / "workspace", layout.workspace)
    write_private(git_dir / "HEAD", layout.head)
    make_private(git_dir)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (replaced atomically), readable by the user alone."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, text.encode("utf-8", "surrogateescape"))
    finally:
        os.close(fd)
    os.replace(temp, path)


def make_private(root: Path) -> None:
    """Folders 0700 and files without group or other bits, under ``root`` (itself included)."""
    for folder, dirs, files in os.walk(root):
        with contextlib.suppress(OSError):
            os.chmod(folder, 0o700)
        for name in files:
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                mode = os.lstat(path).st_mode & 0o777
                if mode & 0o077:
                    os.chmod(path, mode & 0o700)
        dirs.sort()
