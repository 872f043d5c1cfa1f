"""Attacks from inside the sandbox on Zuno's control files and on its secrets.

Each attack runs a real command through the shell tool under real bubblewrap
and real Landlock in ``workspace-write`` mode, and is judged from outside: the
workspace's ``zuno.json``, ``.zuno/`` and ``.git/`` must be byte for byte what
they were, and no secret of the Zuno process (here: this test process) may
appear in anything the command printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandboxed_shell import run_shell
from zuno.config.sandbox import DEFAULT_ENV_REMOVE, SandboxSettings
from zuno.contract.tool import ToolResult
from zuno.execution.sandbox.environment import command_environment

KINDS = ["bubblewrap", "landlock"]

pytestmark = pytest.mark.anyio


@dataclass
class Workspace:
    """A git repository with a ``zuno.json`` and a ``.zuno/`` folder, and a way to run commands."""

    path: Path
    artifacts: Path

    async def run(self, command: str, **settings: object) -> ToolResult:
        return await run_shell(self.path, self.artifacts, command, **settings)


def _snapshot(root: Path) -> dict[str, str]:
    """Every entry under root (not following symlinks): its kind and content."""
    found: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                found[rel] = "link:" + os.readlink(p)
            elif p.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = p.read_bytes().hex()
    return found


def _git(ws: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(ws), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Workspace:
    ws = tmp_path / "ws"
    ws.mkdir()
    _git(ws, "init", "-q")
    _git(ws, "config", "user.email", "t@example.com")
    _git(ws, "config", "user.name", "t")
    (ws / "README.md").write_text("hello\n")
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("x = 1\n")
    (ws / "zuno.json").write_text('{"permission": {"mode": "strict"}}\n')
    (ws / ".zuno").mkdir()
    (ws / ".zuno" / "state").write_text("kept\n")
    _git(ws, "add", "README.md", "src")
    _git(ws, "commit", "-q", "-m", "first")
    return Workspace(ws, tmp_path / "artifacts")


@pytest.fixture
def bare(tmp_path: Path) -> Workspace:
    """A workspace with none of the control files yet."""
    ws = tmp_path / "bare"
    ws.mkdir()
    (ws / "notes.txt").write_text("n\n")
    return Workspace(ws, tmp_path / "artifacts")


def _control(ws: Path) -> dict[str, str]:
    state = {f".git/{k}": v for k, v in _snapshot(ws / ".git").items()}
    state |= {f".zuno/{k}": v for k, v in _snapshot(ws / ".zuno").items()}
    state["zuno.json"] = (ws / "zuno.json").read_bytes().hex()
    return state


def _pwned() -> bool:
    return os.path.lexists("/tmp/pwned")


ATTACKS_ON_EXISTING = {
    "rewrite zuno.json": "echo '{\"hooks\": {}}' > zuno.json",
    "truncate zuno.json": ": > zuno.json",
    "append to zuno.json": "echo x >> zuno.json",
    "move zuno.json away": "mv zuno.json moved.json",
    "replace zuno.json by rename": "echo '{}' > new.json && mv -f new.json zuno.json",
    "delete zuno.json": "rm -f zuno.json",
    "add a git hook": "printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit",
    "edit .git/config": "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> .git/config",
    "git config": "git config core.fsmonitor 'touch /tmp/pwned'",
    "rename .git and make a new one": "mv .git .git-old; mkdir .git && echo x > .git/config",
    "delete .git": "rm -rf .git",
    "write in .zuno": "echo x > .zuno/state; echo y > .zuno/new",
    "replace .zuno": "rm -rf .zuno; mkdir .zuno && echo x > .zuno/new",
    "hooks through a symlink": "ln -s .git/hooks h && echo x > h/post-checkout",
    "zuno.json through a symlink": "ln -s zuno.json l && echo '{}' > l",
    "git dir through /proc": "echo x > /proc/self/cwd/.git/description",
    "hard link out": "ln .git/config cfg && echo x >> cfg",
    "git commit": "echo y > README.md && git commit -qam second",
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("attack", sorted(ATTACKS_ON_EXISTING))
async def test_existing_control_files_are_read_only(
    repo: Workspace, kind: str, attack: str
) -> None:
    before = _control(repo.path)
    await repo.run(ATTACKS_ON_EXISTING[attack], kind=kind)
    assert _control(repo.path) == before
    assert not (repo.path / "moved.json").exists()
    assert not (repo.path / ".git-old").exists()
    assert not _pwned()


ATTACKS_ON_MISSING = {
    "create zuno.json": "echo '{\"hooks\": {}}' > zuno.json",
    "create zuno.json by rename": "echo '{}' > n.json && mv n.json zuno.json",
    "create zuno.json through a symlink": "ln -s zuno.json l && echo '{}' > l",
    "create zuno.json as a folder": "mkdir zuno.json",
    "create .git": "git init -q . ",
    "create .git by rename": "mkdir g && echo x > g/config && mv g .git",
    "create .zuno": "mkdir -p .zuno && echo x > .zuno/state",
    "create .zuno as a symlink": "ln -s /tmp .zuno",
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("attack", sorted(ATTACKS_ON_MISSING))
async def test_missing_control_files_cannot_be_created(
    bare: Workspace, kind: str, attack: str
) -> None:
    await bare.run(ATTACKS_ON_MISSING[attack], kind=kind)
    for name in ("zuno.json", ".git", ".zuno"):
        p = bare.path / name
        assert not p.exists() and not p.is_symlink(), name


@pytest.mark.parametrize("kind", KINDS)
async def test_the_rest_of_the_workspace_stays_writable(repo: Workspace, kind: str) -> None:
    # The control for the refusals above: ordinary work in the same workspace goes on.
    command = (
        "echo new > made.txt && echo more >> README.md && mkdir -p build/out && "
        "echo o > build/out/f && sed -i 's/1/2/' src/a.py && mv made.txt renamed.txt && "
        "git status --porcelain && git log --oneline | wc -l"
    )
    result = await repo.run(command, kind=kind)
    assert result.data is not None and result.data["exit_status"] == 0, result.output
    assert (repo.path / "renamed.txt").read_text() == "new\n"
    assert (repo.path / "README.md").read_text() == "hello\nmore\n"
    assert (repo.path / "src" / "a.py").read_text() == "x = 2\n"
    assert (repo.path / "build" / "out" / "f").read_text() == "o\n"
    assert " M README.md" in result.output


@pytest.mark.parametrize("kind", KINDS)
async def test_a_bare_workspace_is_left_as_it_was(bare: Workspace, kind: str) -> None:
    result = await bare.run("echo made > made.txt && ls -a", kind=kind)
    assert result.data is not None and result.data["exit_status"] == 0, result.output
    assert sorted(p.name for p in bare.path.iterdir()) == ["made.txt", "notes.txt"]


# --- Secrets ---------------------------------------------------------------------------


def test_a_user_env_remove_adds_to_the_built_in_patterns() -> None:
    settings = SandboxSettings(env_remove=("MY_PRIVATE_*",))
    assert set(DEFAULT_ENV_REMOVE) <= set(settings.env_remove)
    base = {"OPENAI_API_KEY": "k", "MY_PRIVATE_X": "p", "GITHUB_TOKEN": "t", "PATH": "/bin"}
    env = command_environment(settings.env_remove, base, keep=settings.env_keep)
    assert env == {"PATH": "/bin"}


def test_an_empty_env_remove_keeps_the_built_in_patterns() -> None:
    settings = SandboxSettings.model_validate({"env_remove": []})
    env = command_environment(settings.env_remove, {"AWS_SECRET_ACCESS_KEY": "s", "HOME": "/h"})
    assert env == {"HOME": "/h"}


def test_env_keep_lets_a_named_variable_through() -> None:
    settings = SandboxSettings(env_keep=("NPM_TOKEN",))
    base = {"NPM_TOKEN": "n", "GITHUB_TOKEN": "g", "npm_token": "lower"}
    env = command_environment(settings.env_remove, base, keep=settings.env_keep)
    assert env == {"NPM_TOKEN": "n"}


async def test_env_keep_reaches_the_command(
    bare: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZUNO_DEPLOY_TOKEN", "kept-on-purpose")
    monkeypatch.setenv("OTHER_TOKEN", "withheld")
    for kind in KINDS:
        result = await bare.run(
            'echo "[$ZUNO_DEPLOY_TOKEN][$OTHER_TOKEN]"', kind=kind, env_keep=["ZUNO_DEPLOY_TOKEN"]
        )
        assert "[kept-on-purpose][]" in result.output


# Reads every environ it can reach and scans the readable memory of a process.
_PROC_ATTACK = r"""
pid={pid}
for f in /proc/$PPID/environ /proc/$pid/environ /proc/$pid/task/*/environ /proc/[0-9]*/environ; do
  tr '\0' '\n' < "$f" 2>/dev/null | grep '^OPENAI_API_KEY='
done
python3 - "$pid" <<'EOF'
import re, sys
pid = int(sys.argv[1])
try:
    maps = open(f"/proc/{{pid}}/maps").read().splitlines()
    mem = open(f"/proc/{{pid}}/mem", "rb", buffering=0)
except OSError as exc:
    print("mem closed:", exc)
    sys.exit(0)
print("MEM-OPEN")
for line in maps:
    span, perms = line.split()[:2]
    if not perms.startswith("r"):
        continue
    lo, hi = (int(x, 16) for x in span.split("-"))
    if hi - lo > 64 << 20:
        continue
    try:
        mem.seek(lo)
        data = mem.read(hi - lo)
    except OSError:
        continue
    for m in re.finditer(rb"sk-zuno-canary-[0-9a-f]{{32}}", data):
        print("FOUND", m.group().decode())
EOF
"""


# Zuno's stand-in: a process whose initial environment (what /proc/PID/environ
# shows) and memory hold the key, running the attack through the shell tool.
_ZUNO = """
import asyncio, os, sys
from pathlib import Path
from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.execution.sandbox import SandboxSettings
from zuno.contract.tool import ToolContext
from zuno.tools.shell import ShellArgs, ShellTool

class Config:
    sandbox = SandboxSettings(kind=sys.argv[1])

ws, attack = Path(sys.argv[2]), sys.argv[3]
ctx = ToolContext(workspace=ws, session_id="s", call_id="c", attempt=1, limits=OutputLimits(),
                  artifacts=ArtifactStore(ws.parent / "artifacts"), config=Config())
args = ShellArgs(command=attack.format(pid=os.getpid()), timeout=60)
print(asyncio.run(ShellTool().run(args, ctx)).output)
"""


@pytest.mark.parametrize("kind", [*KINDS, "none"])
def test_commands_cannot_read_zunos_environment_or_memory(bare: Workspace, kind: str) -> None:
    secret = f"sk-zuno-canary-{uuid.uuid4().hex}"
    env = {**os.environ, "OPENAI_API_KEY": secret}
    done = subprocess.run(
        [sys.executable, "-c", _ZUNO, kind, str(bare.path), _PROC_ATTACK],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    if kind == "none":
        # The control: without a sandbox the same command finds the key in both places.
        assert f"OPENAI_API_KEY={secret}" in done.stdout
        assert f"FOUND {secret}" in done.stdout
    else:
        assert secret not in done.stdout
        assert "MEM-OPEN" not in done.stdout


@pytest.mark.parametrize("kind", KINDS)
async def test_commands_hold_no_capabilities(bare: Workspace, kind: str) -> None:
    # Run as root, a command with capabilities could load a kernel module from the workspace.
    result = await bare.run("grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status", kind=kind)
    lines = [line.split() for line in result.output.splitlines() if line.startswith("Cap")]
    assert len(lines) == 4, result.output
    assert all(int(value, 16) == 0 for _, value in lines), result.output


# --- Through the real CLI ----------------------------------------------------------------

ZUNO = str(Path(sys.executable).with_name("zuno"))

_CLI_ATTACK = (
    "echo '{\"hooks\": {}}' > zuno.json; printf '#!/bin/sh\\n' > .git/hooks/pre-commit; "
    "git config core.fsmonitor 'touch /tmp/pwned'; mv .git .git-old; mkdir -p .zuno/skills; "
    "tr '\\0' '\\n' < /proc/$PPID/environ | grep OPENAI; "
    "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep OPENAI; echo attempted"
)


@pytest.mark.parametrize("kind", KINDS)
def test_cli_call_refuses_control_file_and_secret_attacks(tmp_path: Path, kind: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    # The user's own (trusted) configuration lets every call run, so the sandbox is the
    # only thing between the command and the files.
    config = {"permission": {"mode": "permissive"}, "sandbox": {"kind": kind}}
    (home / "zuno.json").write_text(json.dumps(config))
    ws = tmp_path / "ws"
    ws.mkdir()
    _git(ws, "init", "-q")
    (ws / "zuno.json").write_text("{}\n")
    before = _snapshot(ws)
    secret = f"sk-zuno-canary-{uuid.uuid4().hex}"
    env = {
        **os.environ,
        "ZUNO_CONFIG_HOME": str(home),
        "ZUNO_DB": str(tmp_path / "z.db"),
        "OPENAI_API_KEY": secret,
    }
    proc = subprocess.run(
        [ZUNO, "call", "shell", json.dumps({"command": _CLI_ATTACK}), "--json"],
        cwd=ws,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    result = json.loads(proc.stdout)
    assert result["data"]["sandbox"] == kind, result
    assert "attempted" in result["result"], result
    assert secret not in proc.stdout + proc.stderr
    assert _snapshot(ws) == before
    assert not _pwned()


@pytest.mark.parametrize("kind", KINDS)
async def test_naming_git_in_writable_roots_lets_commands_commit(
    repo: Workspace, kind: str
) -> None:
    # The user's explicit opt-out for .git only; zuno.json and .zuno stay read-only.
    before = (repo.path / "zuno.json").read_bytes()
    result = await repo.run(
        "echo y >> README.md && git commit -qam second && git log --oneline | wc -l; "
        "echo '{}' > zuno.json",
        kind=kind,
        writable_roots=[".git"],
    )
    assert "2" in result.output, result.output
    assert (repo.path / "zuno.json").read_bytes() == before
