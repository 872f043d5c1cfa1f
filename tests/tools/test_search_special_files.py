"""grep and glob on special files and ignored folders, against real rg.

A named pipe, ``/dev/zero`` or ``/dev/urandom`` given as the path made rg wait
or read forever; they are refused before rg starts. ``glob "*"`` listed ``.git``
and ignored folders because rg's ``--glob`` overrides the ignore files; the
ignore files now hold for glob patterns and grep's include globs alike.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from zuno.config.loading import Config
from zuno.contract.calls import CallResult
from zuno.core.declarations import BlockKind, Outcome
from zuno.policy.approvals import DenyAll
from zuno.session.builtin_tools import builtin_tools
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

HANG_GUARD = 120
"""Seconds after which a call that should have returned at once is cancelled (a hang)."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def runtime(workspace: Path, tmp_path: Path, **config: Any) -> Runtime:
    cfg = Config.model_validate({"permission": {"mode": "permissive"}, **config})
    return Runtime(
        workspace,
        config=cfg,
        db_path=tmp_path / "z.db",
        approver=DenyAll(),
        tools=builtin_tools(cfg),
    )


async def call(rt: Runtime, tool: str, args: dict[str, Any]) -> CallResult:
    with anyio.fail_after(HANG_GUARD):
        return await rt.call(rt.open_session(), tool, args)


@pytest.mark.parametrize("path", ["fifo", "/dev/zero", "/dev/urandom", "zero_link"])
async def test_grep_refuses_special_files(workspace: Path, tmp_path: Path, path: str) -> None:
    os.mkfifo(workspace / "fifo")
    (workspace / "zero_link").symlink_to("/dev/zero")
    result = await call(runtime(workspace, tmp_path), "grep", {"pattern": "x", "path": path})
    assert result.outcome is Outcome.BLOCKED, result.output
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "not a regular file or folder" in result.output


@pytest.mark.parametrize("path", ["fifo", "/dev/zero", "/dev/urandom"])
async def test_read_refuses_special_files(workspace: Path, tmp_path: Path, path: str) -> None:
    os.mkfifo(workspace / "fifo")
    result = await call(runtime(workspace, tmp_path), "read", {"path": path})
    assert result.outcome is Outcome.ERROR and "not a regular file" in result.output


async def test_a_folder_holding_special_files_is_searched(workspace: Path, tmp_path: Path) -> None:
    os.mkfifo(workspace / "fifo")
    (workspace / "zero_link").symlink_to("/dev/zero")
    (workspace / "a.txt").write_text("needle\n")
    rt = runtime(workspace, tmp_path)
    grep = await call(rt, "grep", {"pattern": "needle", "hidden": True})
    glob = await call(rt, "glob", {"pattern": "*"})
    assert grep.outcome is Outcome.OK and grep.data is not None
    assert [line["path"] for line in grep.data["lines"]] == ["a.txt"]
    assert glob.data is not None and glob.data["paths"] == ["a.txt"]


@pytest.fixture
def repository(workspace: Path) -> Path:
    """A git repository with ignored folders of each kind of ignore file, and a hidden one."""
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    files = {
        "src/app.py": "needle\n",
        "README.md": "needle\n",
        "node_modules/pkg/index.js": "needle\n",
        "build/out.txt": "needle\n",
        "cache/c.txt": "needle\n",
        "docs/private.md": "needle\n",
        ".github/workflows/ci.yml": "needle\n",
        ".gitignore": "node_modules/\nbuild/\n",
        ".ignore": "cache/\n",
        ".rgignore": "docs/private.md\n",
    }
    for name, text in files.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return workspace


@pytest.mark.parametrize("pattern", ["*", "**", "**/*", "*.txt", "**/*.js"])
async def test_glob_honours_ignore_files_and_skips_git(
    repository: Path, tmp_path: Path, pattern: str
) -> None:
    result = await call(runtime(repository, tmp_path), "glob", {"pattern": pattern})
    assert result.outcome is Outcome.OK and result.data is not None
    paths: list[str] = result.data["paths"]
    for prefix in (".git/", "node_modules/", "build/", "cache/", "docs/private.md", ".github/"):
        assert not any(p.startswith(prefix) for p in paths), (prefix, paths)
    if pattern in ("*", "**", "**/*"):
        assert paths == ["README.md", "src/app.py"]


async def test_glob_naming_hidden_entries_still_lists_them_but_never_git(
    repository: Path, tmp_path: Path
) -> None:
    rt = runtime(repository, tmp_path)
    github = await call(rt, "glob", {"pattern": ".github/**/*.yml"})
    dots = await call(rt, "glob", {"pattern": ".*"})
    assert github.data is not None and github.data["paths"] == [".github/workflows/ci.yml"]
    assert dots.data is not None
    assert dots.data["paths"] == [".gitignore", ".ignore", ".rgignore"]


@pytest.mark.parametrize("include", ["*", "**", "*.js", "*.{js,txt}"])
async def test_grep_include_honours_ignore_files(
    repository: Path, tmp_path: Path, include: str
) -> None:
    rt = runtime(repository, tmp_path)
    result = await call(
        rt, "grep", {"pattern": "needle", "include": include, "output_mode": "files"}
    )
    assert result.outcome is Outcome.OK and result.data is not None
    expected = {"*": ["README.md", "src/app.py"], "**": ["README.md", "src/app.py"]}
    assert result.data["paths"] == expected.get(include, [])


async def test_a_broken_glob_is_still_reported(repository: Path, tmp_path: Path) -> None:
    rt = runtime(repository, tmp_path)
    glob = await call(rt, "glob", {"pattern": "src/["})
    grep = await call(rt, "grep", {"pattern": "x", "include": "a{b"})
    for result in (glob, grep):
        assert result.outcome is Outcome.ERROR and "glob" in result.output
        assert ".zuno-glob-check" not in result.output


async def test_a_glob_with_a_line_break_is_refused(repository: Path, tmp_path: Path) -> None:
    rt = runtime(repository, tmp_path)
    result = await call(rt, "glob", {"pattern": "*.md\n!node_modules/**"})
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
