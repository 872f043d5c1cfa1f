"""File tools and the sandbox settings: read-only refuses them, writable_roots admit them,
and a write that fails on the disk leaves nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from zuno.config.loading import Config
from zuno.config.sandbox import SandboxMode, SandboxSettings
from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import (
    ArgumentsRejected,
    PathOutsideWorkspace,
    Tool,
    ToolArgs,
    ToolContext,
    WritesNotAllowed,
)
from zuno.core.declarations import BlockKind, Outcome
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime
from zuno.tools.edit import EditArgs, EditTool
from zuno.tools.patch import ApplyPatchArgs, ApplyPatchTool
from zuno.tools.write import WriteArgs, WriteTool

ZUNO = Path(sys.executable).with_name("zuno")


def patch(*lines: str) -> str:
    return "\n".join(("*** Begin Patch", *lines, "*** End Patch")) + "\n"


# Every way a file tool can change a file, each aimed at a file that exists.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("write", {"path": "new.txt", "content": "x\n"}),
    ("write", {"path": "a.txt", "content": "replaced\n"}),
    ("write", {"path": "sub/deep/new.txt", "content": "x\n"}),
    ("edit", {"path": "a.txt", "old_string": "alpha", "new_string": "beta"}),
    ("apply_patch", {"patch": patch("*** Add File: added.txt", "+x")}),
    ("apply_patch", {"patch": patch("*** Update File: a.txt", "-alpha", "+beta")}),
    ("apply_patch", {"patch": patch("*** Delete File: a.txt")}),
    ("apply_patch", {"patch": patch("*** Update File: a.txt", "*** Move to: b.txt", "-alpha")}),
]
TOOLS: dict[str, tuple[Tool[Any], type[ToolArgs]]] = {
    "write": (WriteTool(), WriteArgs),
    "edit": (EditTool(), EditArgs),
    "apply_patch": (ApplyPatchTool(), ApplyPatchArgs),
}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    return root


def settings(mode: SandboxMode = "workspace-write", roots: tuple[str, ...] = ()) -> Config:
    return Config(sandbox=SandboxSettings(mode=mode, writable_roots=roots))


def context(ws: Path, config: Config) -> ToolContext:
    return ToolContext(
        workspace=ws,
        session_id="s",
        call_id="c",
        attempt=1,
        limits=OutputLimits(),
        artifacts=ArtifactStore(ws.parent / "artifacts"),
        config=config,
    )


async def run(ws: Path, config: Config, name: str, arguments: dict[str, Any]) -> str:
    tool, model = TOOLS[name]
    result = await tool.run(model.model_validate(arguments), context(ws, config))
    return result.output


def tree(folder: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
    }


# --- read-only ----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "arguments"), CALLS)
def test_read_only_refuses_every_file_tool_before_any_effect(
    ws: Path, name: str, arguments: dict[str, Any]
) -> None:
    before = tree(ws.parent)
    with pytest.raises(ArgumentsRejected, match="read-only"):
        anyio.run(run, ws, settings("read-only"), name, arguments)
    assert tree(ws.parent) == before


@pytest.mark.parametrize(("name", "arguments"), CALLS)
def test_the_same_calls_write_in_workspace_write_mode(
    ws: Path, name: str, arguments: dict[str, Any]
) -> None:
    before = tree(ws)
    anyio.run(run, ws, settings("workspace-write"), name, arguments)
    assert tree(ws) != before


def test_read_only_refusal_is_its_own_error(ws: Path) -> None:
    with pytest.raises(WritesNotAllowed, match=r"sandbox\.mode is read-only"):
        anyio.run(run, ws, settings("read-only"), "write", {"path": "x", "content": ""})


def test_read_only_through_the_runtime_is_blocked(ws: Path, tmp_path: Path) -> None:
    async def main() -> list[tuple[Outcome, BlockKind | None, str]]:
        rt = Runtime(
            ws,
            config=settings("read-only"),
            db_path=tmp_path / "z.db",
            approver=ApproveAll(),
            tools=[WriteTool(), ApplyPatchTool(ws)],
        )
        out = []
        try:
            async with rt:
                for name, arguments in CALLS:
                    if name != "edit":
                        r = await rt.call(rt.open_session(), name, arguments)
                        out.append((r.outcome, r.block_kind, r.output))
        finally:
            rt.close()
        return out

    before = tree(ws)
    results = anyio.run(main)
    assert len(results) == 7
    for outcome, kind, output in results:
        assert (outcome, kind) == (Outcome.BLOCKED, BlockKind.DENIED), output
        assert "read-only" in output and "Nothing was run" in output
    assert tree(ws) == before


def _cli(ws: Path, tmp_path: Path, mode: str, tool: str, arguments: dict[str, Any]) -> int:
    # The user's own configuration: file tools allowed by rule, so that only the
    # sandbox mode can stop them (no --yes; stdin is not a terminal).
    home = Path(os.environ["ZUNO_CONFIG_HOME"])
    rules = [{"tool": t, "action": "allow"} for t in ("write", "apply_patch")]
    (home / "zuno.json").write_text(
        json.dumps({"sandbox": {"mode": mode}, "permission": {"rules": rules}})
    )
    done = subprocess.run(
        [
            str(ZUNO),
            "call",
            tool,
            json.dumps(arguments),
            "-w",
            str(ws),
            "--db",
            str(tmp_path / "c.db"),
            "--json",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if mode == "read-only":
        result = json.loads(done.stdout)
        assert (result["outcome"], result["block_kind"]) == ("blocked", "denied"), done.stdout
        assert "read-only" in result["result"]
    return done.returncode


def test_read_only_through_the_cli(ws: Path, tmp_path: Path) -> None:
    before = tree(ws)
    write = {"path": "cli.txt", "content": "x\n"}
    delete = {"patch": patch("*** Delete File: a.txt")}
    assert _cli(ws, tmp_path, "read-only", "write", write) == 1
    assert _cli(ws, tmp_path, "read-only", "apply_patch", delete) == 1
    assert tree(ws) == before
    # The same calls land once the mode allows them: the refusal was the mode's.
    assert _cli(ws, tmp_path, "workspace-write", "write", write) == 0
    # A file is deleted only after the session has read it (zuno.durability.file_versions).
    assert _cli(ws, tmp_path, "workspace-write", "read", {"path": "a.txt"}) == 0
    assert _cli(ws, tmp_path, "workspace-write", "apply_patch", delete) == 0
    assert tree(ws) == {"cli.txt": b"x\n"}


# --- writable_roots -----------------------------------------------------------------


@pytest.fixture
def extra(tmp_path: Path) -> Path:
    folder = tmp_path / "extra"
    folder.mkdir()
    (folder / "notes.txt").write_text("alpha\n")
    return folder


@pytest.mark.parametrize("mode", ["workspace-write", "full-access"])
def test_writable_roots_admit_every_file_tool(ws: Path, extra: Path, mode: SandboxMode) -> None:
    config = settings(mode, (str(extra),))
    anyio.run(run, ws, config, "write", {"path": str(extra / "w/new.txt"), "content": "w\n"})
    edit = {"path": str(extra / "notes.txt"), "old_string": "alpha", "new_string": "beta"}
    anyio.run(run, ws, config, "edit", edit)
    text = patch(
        f"*** Add File: {extra}/added.txt",
        "+a",
        f"*** Update File: {extra}/notes.txt",
        f"*** Move to: {extra}/moved.txt",
        "-beta",
        "+gamma",
    )
    anyio.run(run, ws, config, "apply_patch", {"patch": text})
    assert tree(extra) == {
        "w": None,
        "w/new.txt": b"w\n",
        "added.txt": b"a\n",
        "moved.txt": b"gamma\n",
    }


def test_relative_writable_root_starts_in_the_workspace(ws: Path, extra: Path) -> None:
    config = settings("workspace-write", ("../extra",))
    anyio.run(run, ws, config, "write", {"path": "../extra/rel.txt", "content": "r\n"})
    assert (extra / "rel.txt").read_text() == "r\n"


@pytest.mark.parametrize("mode", ["workspace-write", "full-access"])
def test_outside_every_root_is_refused(ws: Path, extra: Path, mode: SandboxMode) -> None:
    # full-access lifts the sandbox from commands; file tools stay within their roots.
    before = tree(extra)
    for name, arguments in [
        ("write", {"path": str(extra / "x.txt"), "content": "x"}),
        ("edit", {"path": str(extra / "notes.txt"), "old_string": "alpha", "new_string": "b"}),
        ("apply_patch", {"patch": patch(f"*** Delete File: {extra}/notes.txt")}),
    ]:
        with pytest.raises(ArgumentsRejected, match="outside the workspace"):
            anyio.run(run, ws, settings(mode), name, arguments)
    assert tree(extra) == before


def test_a_link_in_a_writable_root_leading_out_is_refused(
    ws: Path, extra: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (extra / "out").symlink_to(elsewhere)
    config = settings("workspace-write", (str(extra),))
    with pytest.raises(PathOutsideWorkspace):
        anyio.run(run, ws, config, "write", {"path": str(extra / "out/x.txt"), "content": "x"})
    assert list(elsewhere.iterdir()) == []


def test_a_missing_writable_root_admits_nothing(ws: Path, tmp_path: Path) -> None:
    config = settings("workspace-write", (str(tmp_path / "gone"),))
    with pytest.raises(PathOutsideWorkspace, match="writable_roots"):
        anyio.run(run, ws, config, "write", {"path": str(tmp_path / "gone/x"), "content": ""})
    assert not (tmp_path / "gone").exists()


# --- a write that fails on the disk -------------------------------------------------

# The child process may not grow any file past 4 KiB (RLIMIT_FSIZE): the kernel
# fails the write of a bigger temporary file with EFBIG, a real disk error.
_LIMITED = r"""
import json, resource, signal, sys
from pathlib import Path
import anyio
from zuno.config.loading import Config
from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import ToolContext, ToolError
from zuno.tools.patch import ApplyPatchArgs, ApplyPatchTool
from zuno.tools.write import WriteArgs, WriteTool

ws = Path(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
ctx = ToolContext(ws, "s", "c", 1, OutputLimits(), ArtifactStore(ws.parent / "art"), Config())
big = "x" * 65536 + "\n"
calls = [
    (WriteTool(), WriteArgs(path="a.txt", content=big)),
    (WriteTool(), WriteArgs(path="new/deeper/big.txt", content=big)),
    (ApplyPatchTool(), ApplyPatchArgs(patch="*** Begin Patch\n*** Update File: a.txt\n"
        "-alpha\n+beta\n*** Add File: fresh/big.txt\n+" + big + "*** End Patch\n")),
]
errors = []
for tool, args in calls:
    try:
        anyio.run(tool.run, args, ctx)
        errors.append(None)
    except ToolError as error:
        errors.append(f"{type(error).__name__}: {error}")
print(json.dumps(errors))
"""


def test_disk_error_leaves_no_temporary_and_no_new_folder(ws: Path) -> None:
    before = tree(ws)
    done = subprocess.run(
        [sys.executable, "-c", _LIMITED, str(ws)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    errors = json.loads(done.stdout)
    assert len(errors) == 3
    assert all(e is not None and "File too large" in e for e in errors), errors
    assert tree(ws) == before  # no temporary file, no folder made for the new files


# --- the approval prompt ------------------------------------------------------------


def test_write_preview_never_shows_a_file_outside_the_workspace(ws: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=hunter2\n")
    (ws / "link.txt").symlink_to(secret)
    (ws / "dir").symlink_to(tmp_path)
    tool = WriteTool()
    for path in (str(secret), "../secret.txt", "link.txt", "dir/secret.txt"):
        shown = tool.preview(WriteArgs(path=path, content="x\n"), ws)
        assert "hunter2" not in shown, (path, shown)
    inside = tool.preview(WriteArgs(path="a.txt", content="beta\n"), ws)
    assert "-alpha" in inside and "+beta" in inside


def test_read_only_refuses_in_pre_flight_without_asking(ws: Path, tmp_path: Path) -> None:
    """Nobody is asked to approve a write that read-only mode refuses anyway."""
    asked: list[str] = []

    def approve(request: Any) -> bool:
        asked.append(request.tool)
        return True

    async def main() -> list[tuple[Outcome, BlockKind | None, str]]:
        from zuno.policy.approvals import CallbackApprover

        rt = Runtime(
            ws,
            config=settings("read-only").model_copy(update={"tools": {"edit": True}}),
            db_path=tmp_path / "z.db",
            approver=CallbackApprover(approve),
            tools=[WriteTool(), ApplyPatchTool(ws), EditTool()],
        )
        out = []
        try:
            async with rt:
                for name, arguments in CALLS:
                    r = await rt.call(rt.open_session(), name, arguments)
                    out.append((r.outcome, r.block_kind, r.output))
        finally:
            rt.close()
        return out

    before = tree(ws)
    results = anyio.run(main)
    assert asked == []
    for outcome, kind, output in results:
        assert (outcome, kind) == (Outcome.BLOCKED, BlockKind.DENIED), output
        assert "read-only" in output
    assert tree(ws) == before
