"""Behaviour of the ``read`` tool on real files."""

from __future__ import annotations

import os
import subprocess
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import ToolContext, ToolError, ToolResult
from zuno.core.declarations import INSPECTION
from zuno.tools.read import ReadArgs, ReadTool
from zuno.tools.read_lines import MAX_LINE_CHARS

GIB = 1 << 30


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_ctx(workspace: Path, limits: OutputLimits | None = None) -> ToolContext:
    return ToolContext(
        workspace=workspace,
        session_id="s",
        call_id="c",
        attempt=1,
        limits=limits or OutputLimits(),
        artifacts=ArtifactStore(workspace / "artifacts"),
        config=None,  # type: ignore[arg-type]
    )


async def read(workspace: Path, limits: OutputLimits | None = None, **args: Any) -> ToolResult:
    return await ReadTool().run(ReadArgs(**args), make_ctx(workspace, limits))


def numbered(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


# --- declaration and schema ------------------------------------------------------


def test_declared_as_plain_inspection() -> None:
    tool = ReadTool()
    assert tool.declare(ReadArgs(path="x")) == INSPECTION
    assert (tool.rule_argument, tool.rule_match) == ("path", "path")


def test_schema_states_bounds() -> None:
    schema = ReadTool().schema()
    assert schema["required"] == ["path"]
    limit = schema["properties"]["limit"]["anyOf"][0]
    assert (limit["minimum"], limit["maximum"]) == (1, 10000)
    assert schema["properties"]["offset"]["anyOf"][0]["minimum"] == 1
    with pytest.raises(ValidationError):
        ReadArgs(path="x", limit=0)
    with pytest.raises(ValidationError):
        ReadArgs(path="x", unknown=1)  # type: ignore[call-arg]


# --- files -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_lines_are_numbered_cat_style(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import os\n\n    x = 1\n")
    result = await read(tmp_path, path="a.py")
    assert result.output == "1\timport os\n2\t\n3\t    x = 1"
    assert result.data == {
        "path": str(tmp_path / "a.py"),
        "kind": "file",
        "lines_shown": 3,
        "total_lines": 3,
        "next_offset": None,
    }


@pytest.mark.anyio
async def test_numbers_right_aligned_to_widest(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text(numbered(12))
    result = await read(tmp_path, path="f.txt", offset=8, limit=5)
    lines = result.output.splitlines()
    assert lines[0] == " 8\tline 8"
    assert lines[2] == "10\tline 10"


@pytest.mark.anyio
async def test_offset_limit_and_next_offset_hint(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text(numbered(100))
    result = await read(tmp_path, path="f.txt", offset=11, limit=10)
    lines = result.output.splitlines()
    assert lines[0] == "11\tline 11"
    assert lines[9] == "20\tline 20"
    assert "Lines 11-20 of 100 shown" in lines[10]
    assert "offset=21" in lines[10]
    assert result.data is not None
    assert result.data["next_offset"] == 21
    assert result.data["total_lines"] == 100


@pytest.mark.anyio
async def test_last_page_has_no_hint(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text(numbered(30))
    result = await read(tmp_path, path="f.txt", offset=21, limit=10)
    assert result.output.splitlines()[-1] == "30\tline 30"
    assert result.data is not None
    assert result.data["next_offset"] is None


@pytest.mark.anyio
async def test_default_read_fits_the_line_limit(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text(numbered(5000))
    result = await read(tmp_path, path="f.txt")
    lines = result.output.splitlines()
    assert len(lines) <= OutputLimits().max_lines
    assert result.data is not None
    next_offset = result.data["next_offset"]
    # The hint is exact: the last shown line is the one before it.
    assert lines[-2].split("\t")[0] == str(next_offset - 1)
    assert f"offset={next_offset}" in lines[-1]


@pytest.mark.anyio
async def test_byte_limit_stops_early_with_exact_hint(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("".join(f"{i:04d}" + "y" * 96 + "\n" for i in range(500)))
    limits = OutputLimits(max_bytes=2000, max_lines=2000)
    result = await read(tmp_path, limits, path="f.txt")
    assert len(result.output.encode()) <= 2000
    assert result.data is not None
    next_offset = result.data["next_offset"]
    assert isinstance(next_offset, int) and 1 < next_offset < 30
    follow = await read(tmp_path, limits, path="f.txt", offset=next_offset)
    assert follow.output.startswith(f"{next_offset}\t{next_offset - 1:04d}")


@pytest.mark.anyio
async def test_offset_past_end_is_an_error_naming_the_size(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("a\nb\nc")
    with pytest.raises(ToolError, match=r"has 3 lines; use an offset from 1 to 3"):
        await read(tmp_path, path="f.txt", offset=4)
    with pytest.raises(ToolError, match="has 3 lines"):
        await read(tmp_path, path="f.txt", offset=50)


@pytest.mark.anyio
async def test_long_line_cut_with_count(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("é" * 5000 + "\nnext\n")
    result = await read(tmp_path, path="f.txt")
    first, second = result.output.splitlines()[:2]
    assert first.startswith("1\t" + "é" * MAX_LINE_CHARS + " [")
    assert "3000 more characters" in first
    assert second == "2\tnext"
    assert "1 long line(s) cut" in result.output


@pytest.mark.anyio
async def test_huge_single_line_is_drained_not_held(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"z" * (8 << 20) + b"\nafter\n")
    tracemalloc.start()
    try:
        result = await read(tmp_path, path="f.txt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"{(8 << 20) - MAX_LINE_CHARS} more characters" in result.output
    assert "2\tafter" in result.output
    assert peak < 4 << 20


@pytest.mark.anyio
async def test_crlf_shown_without_carriage_returns(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"one\r\ntwo\r\n")
    result = await read(tmp_path, path="f.txt")
    assert result.output.startswith("1\tone\n2\ttwo\n")
    assert "\r" not in result.output
    assert "CRLF" in result.output


@pytest.mark.anyio
async def test_invalid_utf8_replaced(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_bytes(b"ok \xff\xfe bad\nfine\n")
    result = await read(tmp_path, path="f.txt")
    assert result.output == "1\tok \ufffd\ufffd bad\n2\tfine"


@pytest.mark.anyio
async def test_empty_file_says_so(tmp_path: Path) -> None:
    (tmp_path / "e.txt").write_bytes(b"")
    result = await read(tmp_path, path="e.txt")
    assert result.output == "e.txt is empty (0 bytes)."
    assert result.data is not None
    assert result.data["total_lines"] == 0


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "kind"),
    [
        (b"\x89PNG\r\n\x1a\n" + b"x" * 100, "PNG image"),
        (b"%PDF-1.7\nsome text", "PDF document"),
        (b"text then \x00 a NUL", "contains NUL bytes"),
        (b"\x7fELF\x02\x01\x01", "ELF executable"),
    ],
)
async def test_binary_refused_with_type_and_size(tmp_path: Path, content: bytes, kind: str) -> None:
    (tmp_path / "b.bin").write_bytes(content)
    with pytest.raises(ToolError) as caught:
        await read(tmp_path, path="b.bin")
    message = str(caught.value)
    assert "binary" in message
    assert kind in message
    assert f"{len(content)} B" in message


@pytest.mark.anyio
async def test_special_file_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ToolError, match="named pipe"):
        await read(tmp_path, path="pipe")


# --- locations ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_absolute_path_outside_workspace_and_artifacts_are_readable(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("far away\n")
    result = await read(workspace, path=str(outside))
    assert result.output == "1\tfar away"
    artifact = make_ctx(workspace).artifact_path("stdout")
    artifact.parent.mkdir(parents=True, exist_ok=True)
    artifact.write_text("saved output\n")
    result = await read(workspace, path=str(artifact))
    assert result.output == "1\tsaved output"


@pytest.mark.anyio
async def test_missing_file_suggests_close_names(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "config.py").write_text("x\n")
    (tmp_path / "src" / "unrelated.txt").write_text("x\n")
    with pytest.raises(ToolError) as caught:
        await read(tmp_path, path="src/confg.py")
    message = str(caught.value)
    assert "src/confg.py does not exist" in message
    assert "src/config.py" in message
    assert "unrelated" not in message


@pytest.mark.anyio
async def test_missing_folder_component_suggests_the_folder(tmp_path: Path) -> None:
    (tmp_path / "package").mkdir()
    with pytest.raises(ToolError, match="Did you mean: package"):
        await read(tmp_path, path="pakage/mod.py")


@pytest.mark.anyio
async def test_missing_file_found_elsewhere_by_basename(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (deep / "Settings.toml").write_text("x\n")
    with pytest.raises(ToolError, match=r"a/b/Settings\.toml"):
        await read(tmp_path, path="settings.toml")


@pytest.mark.anyio
async def test_missing_with_no_match_points_to_glob(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="search with glob"):
        await read(tmp_path, path="qqqqqq.zz")


# --- folders -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_folder_lists_sorted_entries_with_slash(tmp_path: Path) -> None:
    (tmp_path / "zeta.txt").write_text("")
    (tmp_path / "alpha").mkdir()
    (tmp_path / "beta.py").write_text("")
    result = await read(tmp_path, path=".")
    assert result.output == "alpha/\nbeta.py\nzeta.txt"
    assert result.data is not None
    assert result.data["kind"] == "directory"


@pytest.mark.anyio
async def test_folder_listing_is_paged(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(50):
        (folder / f"f{i:03d}").write_text("")
    result = await read(tmp_path, path="many", limit=20)
    lines = result.output.splitlines()
    assert lines[:2] == ["f000", "f001"]
    assert "Entries 1-20 of 50 shown" in lines[-1]
    assert "offset=21" in lines[-1]
    result = await read(tmp_path, path="many", offset=41, limit=20)
    assert result.output.splitlines()[0] == "f040"
    assert result.data is not None
    assert result.data["next_offset"] is None


@pytest.mark.anyio
async def test_empty_folder_says_so(tmp_path: Path) -> None:
    (tmp_path / "void").mkdir()
    result = await read(tmp_path, path="void")
    assert result.output == "void is an empty folder."


# --- large files -------------------------------------------------------------------


def sparse_file(path: Path, text_head: bytes, size: int = GIB) -> None:
    """A large file: some text, then a hole the file system does not store."""
    path.write_bytes(text_head)
    subprocess.run(["truncate", "-s", str(size), str(path)], check=True)
    assert path.stat().st_size == size


@pytest.mark.anyio
async def test_start_of_sparse_gib_file_reads_in_bounded_memory(tmp_path: Path) -> None:
    head = numbered(3000).encode()
    big = tmp_path / "big.txt"
    sparse_file(big, head)
    tracemalloc.start()
    try:
        result = await read(tmp_path, path="big.txt")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.output.startswith("   1\tline 1\n")
    assert result.data is not None
    assert result.data["next_offset"] is not None
    # Beyond the cheap-count bound the total is unknown rather than paid for.
    assert result.data["total_lines"] is None
    assert peak < 8 << 20, f"peak {peak} bytes"


@pytest.mark.anyio
async def test_offset_into_a_huge_hole_stays_bounded(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    # 256 MiB rather than 1 GiB: reading through a hole makes the kernel zero
    # every page, and the bound on memory does not depend on the size.
    sparse_file(big, numbered(3000).encode(), size=256 << 20)
    tracemalloc.start()
    try:
        result = await read(tmp_path, path="big.txt", offset=2999, limit=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    lines = result.output.splitlines()
    assert lines[:2] == ["2999\tline 2999", "3000\tline 3000"]
    # The hole is one enormous line of NULs: shown replaced and cut, never held.
    assert lines[2].startswith("3001\t\ufffd")
    assert "more characters" in lines[2]
    assert peak < 8 << 20, f"peak {peak} bytes"


# --- fuzz --------------------------------------------------------------------------

_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=20_000),
    st.text(max_size=30),
    st.sampled_from(["f.txt", "sub", "sub/", "missing.txt", "bin.dat", "..", "/", "~", "\x00"]),
    st.lists(st.integers(), max_size=2),
)
_arg_dicts = st.dictionaries(
    st.sampled_from(["path", "offset", "limit", "extra"]), _values, max_size=4
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_arg_dicts)
def test_fuzz_arguments_validate_or_run_cleanly(raw: dict[str, Any]) -> None:
    try:
        args = ReadArgs.model_validate(raw)
    except ValidationError:
        return
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder)
        (workspace / "f.txt").write_text(numbered(40))
        (workspace / "sub").mkdir()
        (workspace / "bin.dat").write_bytes(b"\x00\x01")
        ctx = make_ctx(workspace, OutputLimits(max_bytes=4096, max_lines=50))
        try:
            result = anyio.run(ReadTool().run, args, ctx)
        except ToolError:
            return
        assert isinstance(result.output, str)
        assert len(result.output.encode("utf-8", "replace")) <= 4096 + 512
