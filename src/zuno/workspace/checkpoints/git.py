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

from zuno.workspace.checkpoints.types import CheckpointError

__all__ = [
    "ATTRIBUTES",
    "CONFIG",
    "GUARDS",
    "HEAD_REF",
    "TIMEOUT",
    "StoreLayout",
    "create_store",
    "first_line",
    "git_command",
    "git_env",
    "git_output",
    "make_private",
    "move_ref",
    "read_blobs",
    "run_git",
    "store_is_intact",
    "store_layout",
    "upgrade_earlier",
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


HEAD_REF = "refs/zuno/head"
"""The chain of snapshots (the store's HEAD follows it)."""

TIMEOUT = 600.0
"""Seconds: a first snapshot of a huge tree is slow, a hung git is not waited for."""

# The shadow store's own configuration: exact bytes, no user hooks, filters or helpers.
CONFIG = """\
[core]
\tbare = false
\tuntrackedCache = true
\tfsmonitor = false
\tautocrlf = false
\tsafecrlf = false
\tsymlinks = true
\tfilemode = true
\tignorecase = false
\tprecomposeunicode = false
\tlogAllRefUpdates = false
\tquotePath = false
\texcludesFile = {none}
\thooksPath = {none}
\t# The shared index is rewritten rarely; each snapshot writes only what changed.
\tsplitIndex = true
[status]
\t# The untracked cache serves --untracked-files=all only when it is configured so.
\tshowUntrackedFiles = all
\trenames = false
[index]
\tversion = 4
[gc]
\tauto = 0
[commit]
\tgpgSign = false
[advice]
\taddEmbeddedRepo = false
\taddIgnoredFile = false
[user]
\tname = Zuno
\temail = checkpoints@zuno.invalid
"""
# Highest precedence of all attribute files: no end-of-line conversion, filter or encoding.
ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding\n"


def store_layout(workspace: Path) -> StoreLayout:
    """What a store of ``workspace`` holds, as Zuno writes it (the same for every store)."""
    return StoreLayout(
        config="[core]\n\trepositoryformatversion = 0\n" + CONFIG.format(none=os.devnull),
        attributes=ATTRIBUTES,
        head=f"ref: {HEAD_REF}\n",
        workspace=workspace,
    )


def upgrade_earlier(git_dir: Path, layout: StoreLayout) -> None:
    """A store made by an earlier Zuno (its config named files in the store and did
    not ask for private files): given today's config and made private, chain kept."""
    none = git_dir / "zuno-none"
    earlier = "[core]\n\trepositoryformatversion = 0\n" + CONFIG.replace(
        "\tsharedRepository = 0600\n", ""
    ).format(none=none)
    with contextlib.suppress(OSError):
        if (git_dir / "config").read_text() == earlier:
            write_private(git_dir / "config", layout.config)
            hooks = git_dir / "hooks"
            samples: list[Path] = list(hooks.glob("*.sample")) if hooks.is_dir() else []
            for sample in samples:
                sample.unlink()
            make_private(git_dir)


def run_git(
    git_dir: Path, workspace: Path, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """One guarded git call on the store (text; undecodable bytes kept as surrogates).

    Raises:
        CheckpointError: git is missing or hung.
    """
    try:
        return subprocess.run(
            git_command(*args),
            input=input,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
            env=git_env(git_dir, workspace),
            cwd=workspace,
            timeout=TIMEOUT,
            check=False,
        )
    except FileNotFoundError as exc:
        raise CheckpointError("git is not installed (checkpoints need it)") from exc
    except subprocess.TimeoutExpired as exc:
        raise CheckpointError(f"git {args[0]} took longer than {TIMEOUT:g} s") from exc


def git_output(git_dir: Path, workspace: Path, *args: str, input: str | None = None) -> str:
    """The output of one guarded git call that must succeed.

    Raises:
        CheckpointError: It failed (its first line of error said why).
    """
    proc = run_git(git_dir, workspace, *args, input=input)
    if proc.returncode != 0:
        raise CheckpointError(f"git {args[0]} failed: {first_line(proc.stderr)}")
    return proc.stdout


def read_blobs(git_dir: Path, workspace: Path, oids: list[str]) -> dict[str, bytes]:
    """The contents of many objects in one ``git cat-file --batch``."""
    wanted = list(dict.fromkeys(oids))
    if not wanted:
        return {}
    proc = subprocess.run(
        git_command("cat-file", "--batch"),
        input=("\n".join(wanted) + "\n").encode(),
        capture_output=True,
        env=git_env(git_dir, workspace),
        cwd=workspace,
        timeout=TIMEOUT,
        check=False,
    )
    if proc.returncode != 0:
        raise CheckpointError(f"git cat-file failed: {first_line(proc.stderr)}")
    found: dict[str, bytes] = {}
    data, pos = proc.stdout, 0
    for oid in wanted:
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        if len(header) != 3:
            raise CheckpointError(f"the checkpoint store lacks the object {oid}")
        size = int(header[2])
        found[oid] = data[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return found


def move_ref(ref: Path, commit: str) -> None:
    """Point the ref file at ``commit`` (under the store's lock).

    Overwritten in place when it holds an id already (same length): replacing it
    by a new file makes ext4 flush on every snapshot, milliseconds under load. A
    write of 41 bytes within one block is not torn.
    """
    line = (commit + "\n").encode()
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(ref, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            if os.fstat(fd).st_size == len(line) and os.pwrite(fd, line, 0) == len(line):
                return
        finally:
            os.close(fd)
    ref.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_private(ref, commit + "\n")


def first_line(text: str | bytes) -> str:
    """The first non-blank line of a message (git's stderr), for an error a user reads."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "no message")
