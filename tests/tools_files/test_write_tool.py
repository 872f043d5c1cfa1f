"""Behaviour of the ``write`` tool on real files."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import PathOutsideWorkspace, ToolContext, ToolError, ToolResult
from zuno.core.declarations import Concurrency, Declaration, Effect, Replay
from zuno.tools.write import WriteArgs, WriteTool


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_ctx(workspace: Path) -> ToolContext:
    return ToolContext(
        workspace=workspace,
        session_id="s",
        call_id="c",
        attempt=1,
        limits=OutputLimits(),
        artifacts=ArtifactStore(workspace / "artifacts"),
        config=None,  # type: ignore[arg-type]
    )


async def write(workspace: Path, path: str, content: str) -> ToolResult:
    return await WriteTool().run(WriteArgs(path=path, content=content), make_ctx(workspace))


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".zuno-" in p.name)


def test_declared_with_strict_defaults() -> None:
    tool = WriteTool()
    declaration = tool.declare(WriteArgs(path="x", content=""))
    assert declaration == Declaration()
    assert declaration.effect is Effect.SIDE_EFFECTING
    assert declaration.replay is Replay.NEVER
    assert declaration.concurrency is Concurrency.EXCLUSIVE
    assert (tool.rule_argument, tool.rule_match) == ("path", "path")


def test_schema_requires_both_fields() -> None:
    assert sorted(WriteTool().schema()["required"]) == ["content", "path"]
    with pytest.raises(ValidationError):
        WriteArgs(path="", content="x")
    with pytest.raises(ValidationError):
        WriteArgs.model_validate({"path": "x"})


@pytest.mark.anyio
async def test_creates_file_and_parents(tmp_path: Path) -> None:
    result = await write(tmp_path, "a/b/c.txt", "one\ntwo\n")
    target = tmp_path / "a" / "b" / "c.txt"
    assert target.read_text() == "one\ntwo\n"
    assert result.output == "Created a/b/c.txt: wrote 2 lines, 8 B."
    assert result.data == {"path": str(target), "created": True, "bytes": 8, "lines": 2}
    assert leftovers(target.parent) == []


@pytest.mark.anyio
async def test_new_file_mode_follows_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        await write(tmp_path, "new.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640


@pytest.mark.anyio
async def test_replaces_whole_file_keeping_mode(tmp_path: Path) -> None:
    target = tmp_path / "run.sh"
    target.write_text("#!/bin/sh\necho old\necho more\n")
    target.chmod(0o751)
    result = await write(tmp_path, "run.sh", "#!/bin/sh\necho new")
    assert target.read_text() == "#!/bin/sh\necho new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert result.output.startswith("Replaced run.sh (was 29 B): wrote 2 lines")
    assert result.data is not None
    assert result.data["created"] is False
    assert leftovers(tmp_path) == []


@pytest.mark.anyio
async def test_content_written_exactly(tmp_path: Path) -> None:
    content = "crlf\r\nunicode é ✓\n\tlast"
    result = await write(tmp_path, "x.txt", content)
    assert (tmp_path / "x.txt").read_bytes() == content.encode()
    assert result.data is not None
    assert result.data["bytes"] == len(content.encode())


@pytest.mark.anyio
async def test_empty_content_creates_empty_file(tmp_path: Path) -> None:
    result = await write(tmp_path, "empty", "")
    assert (tmp_path / "empty").read_bytes() == b""
    assert "wrote 0 lines, 0 B" in result.output


@pytest.mark.anyio
async def test_outside_workspace_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with pytest.raises(PathOutsideWorkspace):
        await write(workspace, "../escape.txt", "x")
    with pytest.raises(PathOutsideWorkspace):
        await write(workspace, str(tmp_path / "abs.txt"), "x")
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path / "abs.txt").exists()


@pytest.mark.anyio
async def test_symlinked_folder_leading_out_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    (workspace / "link").symlink_to(outside)
    with pytest.raises(PathOutsideWorkspace):
        await write(workspace, "link/x.txt", "x")
    assert list(outside.iterdir()) == []


@pytest.mark.anyio
async def test_dangling_symlink_leading_out_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "trap").symlink_to(tmp_path / "not-yet.txt")
    with pytest.raises(PathOutsideWorkspace):
        await write(workspace, "trap", "x")
    assert not (tmp_path / "not-yet.txt").exists()


@pytest.mark.anyio
async def test_symlink_inside_is_written_through(tmp_path: Path) -> None:
    (tmp_path / "real.txt").write_text("old\n")
    (tmp_path / "alias.txt").symlink_to("real.txt")
    result = await write(tmp_path, "alias.txt", "new\n")
    assert (tmp_path / "alias.txt").is_symlink()
    assert (tmp_path / "real.txt").read_text() == "new\n"
    assert "through the symlink, to real.txt" in result.output


@pytest.mark.anyio
async def test_folder_target_refused(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(ToolError, match="it is a folder"):
        await write(tmp_path, "dir", "x")
    with pytest.raises(ToolError, match="names a folder"):
        await write(tmp_path, "other/", "x")


@pytest.mark.anyio
async def test_parent_that_is_a_file_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ToolError, match="cannot"):
        await write(tmp_path, "file/child.txt", "x")
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.anyio
async def test_unpaired_surrogate_refused(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="UTF-8"):
        await write(tmp_path, "s.txt", "bad \ud800")
    assert not (tmp_path / "s.txt").exists()


# --- preview -----------------------------------------------------------------------


def test_preview_new_file(tmp_path: Path) -> None:
    text = WriteTool().preview(WriteArgs(path="n.py", content="a\nb\nc\n"), tmp_path)
    assert text == "write n.py: new file, 3 lines (6 B)"


def test_preview_shows_bounded_diff(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("".join(f"{i}\n" for i in range(1000)))
    new = "".join(f"{i}\n" for i in range(1000) if i % 2)
    text = WriteTool().preview(WriteArgs(path="f.txt", content=new), tmp_path)
    assert text.startswith("write f.txt: replaces the file (500 lines)\n--- a/f.txt\n+++ b/f.txt")
    assert "\n-0\n" in text
    assert "more diff lines]" in text
    assert len(text.splitlines()) <= 62


def test_preview_identical_content(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("same\n")
    text = WriteTool().preview(WriteArgs(path="f.txt", content="same\n"), tmp_path)
    assert "no change" in text


# --- fuzz --------------------------------------------------------------------------

_values = st.one_of(
    st.none(),
    st.integers(),
    st.text(max_size=40),
    st.sampled_from(["a.txt", "d/e.txt", "../out.txt", "/abs.txt", "dir", "x/", "~/y", "\x00"]),
)
_arg_dicts = st.dictionaries(st.sampled_from(["path", "content", "mode"]), _values, max_size=3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_arg_dicts)
def test_fuzz_arguments_validate_or_run_cleanly(raw: dict[str, Any]) -> None:
    try:
        args = WriteArgs.model_validate(raw)
    except ValidationError:
        return
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        workspace = root / "ws"
        workspace.mkdir()
        (workspace / "dir").mkdir()
        try:
            result = anyio.run(WriteTool().run, args, make_ctx(workspace))
        except ToolError:
            return
        assert result.data is not None
        written = Path(result.data["path"])
        # Whatever the path, a successful write landed inside the workspace.
        assert workspace.resolve() in written.resolve().parents
        assert written.read_bytes() == args.content.encode()
