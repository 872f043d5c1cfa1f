"""The edit tool: exact replacement, refusals with hints, preserved endings."""

from __future__ import annotations

from pathlib import Path

import pytest
from patch_support import context_for

from zuno.contract.tool import PathOutsideWorkspace, ToolError
from zuno.core.declarations import Declaration
from zuno.tools.edit import EditArgs, EditTool


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


async def edit(ws: Path, path: str, old: str, new: str, replace_all: bool = False) -> str:
    args = EditArgs(path=path, old_string=old, new_string=new, replace_all=replace_all)
    return (await EditTool().run(args, context_for(ws))).output


def test_declaration_and_rule_argument() -> None:
    tool = EditTool()
    args = EditArgs(path="a", old_string="x", new_string="y")
    assert tool.declare(args) == Declaration()
    assert (tool.name, tool.rule_argument, tool.rule_match) == ("edit", "path", "path")
    assert tool.rule_subject(args, Path("/ws")) == "a"


@pytest.mark.anyio
async def test_replaces_a_unique_string(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    output = await edit(ws, "a.py", "y = 2", "y = 3")
    assert (ws / "a.py").read_text() == "x = 1\ny = 3\n"
    assert output == "Edited a.py: replaced 1 occurrence (line 2)."


@pytest.mark.anyio
async def test_not_unique_is_refused_with_count_and_lines(ws: Path) -> None:
    (ws / "a.py").write_text("pass\nx\npass\n")
    with pytest.raises(ToolError, match=r"occurs 2 times in a.py \(lines 1, 3\).*replace_all"):
        await edit(ws, "a.py", "pass", "return")
    assert (ws / "a.py").read_text() == "pass\nx\npass\n"


@pytest.mark.anyio
async def test_replace_all(ws: Path) -> None:
    (ws / "a.py").write_text("pass\nx\npass\n")
    output = await edit(ws, "a.py", "pass", "return", replace_all=True)
    assert (ws / "a.py").read_text() == "return\nx\nreturn\n"
    assert "replaced 2 occurrences (line 1, 3)" in output


@pytest.mark.anyio
async def test_missing_string_is_refused(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\n")
    with pytest.raises(ToolError, match=r"not found in a.py; read the file again"):
        await edit(ws, "a.py", "zzz", "y")


@pytest.mark.anyio
async def test_missing_string_hints_at_a_whitespace_variant(ws: Path) -> None:
    (ws / "a.py").write_text("def f():\n\tif  x:\n\t\treturn 1\n")
    with pytest.raises(ToolError) as info:
        await edit(ws, "a.py", "if x:\n    return 1", "if y:\n    return 1")
    message = str(info.value)
    assert "differs only in whitespace" in message
    assert "line 2" in message
    assert "\tif  x:" in message


@pytest.mark.anyio
async def test_identical_strings_are_refused(ws: Path) -> None:
    (ws / "a.py").write_text("x\n")
    with pytest.raises(ToolError, match=r"identical"):
        await edit(ws, "a.py", "x", "x")


@pytest.mark.anyio
async def test_crlf_file_edited_with_lf_strings_keeps_crlf(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"\xef\xbb\xbfa\r\nb\r\nc")
    await edit(ws, "w.txt", "a\nb", "A\nB\nB2")
    assert (ws / "w.txt").read_bytes() == b"\xef\xbb\xbfA\r\nB\r\nB2\r\nc"


@pytest.mark.anyio
async def test_mixed_endings_file_is_edited_raw(ws: Path) -> None:
    (ws / "m.txt").write_bytes(b"a\r\nb\nc\r\n")
    await edit(ws, "m.txt", "b", "B")
    assert (ws / "m.txt").read_bytes() == b"a\r\nB\nc\r\n"


@pytest.mark.anyio
async def test_path_outside_workspace_is_refused(ws: Path) -> None:
    (ws.parent / "out.txt").write_text("x\n")
    with pytest.raises(PathOutsideWorkspace):
        await edit(ws, "../out.txt", "x", "y")
    assert (ws.parent / "out.txt").read_text() == "x\n"


@pytest.mark.anyio
async def test_missing_file_and_folder_are_refused(ws: Path) -> None:
    with pytest.raises(ToolError, match=r"no such file; to create a file use the write tool"):
        await edit(ws, "nope.txt", "x", "y")
    (ws / "d").mkdir()
    with pytest.raises(ToolError, match=r"is a folder"):
        await edit(ws, "d", "x", "y")
