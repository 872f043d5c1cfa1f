"""The glob and grep tools, run against real rg on temporary trees."""

from __future__ import annotations

import json
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
from zuno.tools import search
from zuno.tools.search import GlobArgs, GlobTool, GrepArgs, GrepTool


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def write(root: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")


def make_ctx(workspace: Path, artifacts: Path, limits: OutputLimits | None = None) -> ToolContext:
    return ToolContext(
        workspace=workspace,
        session_id="session",
        call_id="call",
        attempt=1,
        limits=limits or OutputLimits(),
        artifacts=ArtifactStore(artifacts),
        config=None,  # type: ignore[arg-type]  # the search tools read no configuration
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    write(
        root,
        {
            "README.md": "# Demo\nTODO: write docs\n",
            "src/app.py": "import os\n\ndef main():\n    # TODO: handle errors\n    return 1\n",
            "src/util.py": "def helper():\n    pass\n# todo lower\n",
            "tests/test_app.py": "from src.app import main\n\ndef test_main():\n    main()\n",
            ".github/workflows/ci.yml": "name: ci # TODO\n",
        },
    )
    return root


@pytest.fixture
def ctx(workspace: Path, tmp_path: Path) -> ToolContext:
    # Artifacts live outside the workspace so they never show up in a search.
    return make_ctx(workspace, tmp_path / "artifacts")


async def grep(ctx: ToolContext, **raw: Any) -> ToolResult:
    tool = GrepTool()
    return await tool.run(tool.args_model.model_validate(raw), ctx)


async def glob(ctx: ToolContext, **raw: Any) -> ToolResult:
    tool = GlobTool()
    return await tool.run(tool.args_model.model_validate(raw), ctx)


# ----------------------------------------------------------------------- declarations


def test_tools_are_read_only_safe_parallel_and_match_paths(workspace: Path) -> None:
    for tool in (GlobTool(), GrepTool()):
        assert tool.declaration == INSPECTION
        assert (tool.rule_argument, tool.rule_match) == ("path", "path")
    grep_tool = GrepTool()
    args = GrepArgs(pattern="x", path=str(workspace / "src"))
    assert grep_tool.rule_subject(args, workspace) == "src"
    assert grep_tool.rule_subject(GrepArgs(pattern="x"), workspace) == "."
    assert (GlobTool().name, GrepTool().name) == ("glob", "grep")


def test_schemas_describe_every_argument_and_forbid_extras() -> None:
    for tool in (GlobTool(), GrepTool()):
        schema = tool.schema()
        assert schema.get("additionalProperties") is False
        for name, prop in schema["properties"].items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"
    grep_limit = GrepTool().schema()["properties"]["limit"]
    assert (grep_limit["minimum"], grep_limit["maximum"]) == (1, 1000)
    with pytest.raises(ValidationError):
        GrepArgs.model_validate({"pattern": "x", "regex": True})
    with pytest.raises(ValidationError):
        GrepArgs.model_validate({"pattern": "x", "output_mode": "lines"})
    with pytest.raises(ValidationError):
        GlobArgs.model_validate({"pattern": "a\x00b"})


def test_module_exports_are_defined() -> None:
    for name in search.__all__:
        assert hasattr(search, name), name


# ----------------------------------------------------------------------- glob


@pytest.mark.anyio
async def test_glob_lists_sorted_workspace_paths(ctx: ToolContext) -> None:
    result = await glob(ctx, pattern="*.py")
    assert result.output.splitlines() == ["src/app.py", "src/util.py", "tests/test_app.py"]
    assert result.data is not None
    assert result.data["total"] == 3 and result.data["truncated"] is False


@pytest.mark.anyio
async def test_glob_in_a_subdirectory_keeps_workspace_relative_paths(ctx: ToolContext) -> None:
    result = await glob(ctx, pattern="*.py", path="src")
    assert result.output.splitlines() == ["src/app.py", "src/util.py"]


@pytest.mark.anyio
async def test_glob_limit_says_how_many_more(ctx: ToolContext) -> None:
    result = await glob(ctx, pattern="*.py", limit=1)
    lines = result.output.splitlines()
    assert lines[0] == "src/app.py"
    assert "2 more files not shown" in lines[1] and "narrow" in lines[1]
    assert result.data is not None and result.data["truncated"] is True


@pytest.mark.anyio
async def test_glob_lists_hidden_files_only_when_the_pattern_names_them(
    ctx: ToolContext,
) -> None:
    assert "ci.yml" not in (await glob(ctx, pattern="*.yml")).output
    named = await glob(ctx, pattern=".github/**/*.yml")
    assert named.output.splitlines() == [".github/workflows/ci.yml"]


@pytest.mark.anyio
async def test_glob_without_matches_says_so(ctx: ToolContext) -> None:
    result = await glob(ctx, pattern="*.rs")
    assert "No files match '*.rs'" in result.output


@pytest.mark.anyio
async def test_glob_errors(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="does not exist"):
        await glob(ctx, pattern="*", path="nope")
    with pytest.raises(ToolError, match="needs a directory"):
        await glob(ctx, pattern="*", path="README.md")
    with pytest.raises(ToolError, match="invalid glob"):
        await glob(ctx, pattern="[")


# ----------------------------------------------------------------------- grep


@pytest.mark.anyio
async def test_grep_content_is_path_line_text(ctx: ToolContext) -> None:
    result = await grep(ctx, pattern="TODO")
    assert result.output.splitlines() == [
        "README.md:2:TODO: write docs",
        "src/app.py:4:    # TODO: handle errors",
    ]
    assert result.data is not None
    assert result.data["matches"] == 2 and result.data["truncated"] is False
    assert result.data["lines"][0] == {
        "path": "README.md",
        "line": 2,
        "text": "TODO: write docs",
        "match": True,
    }


@pytest.mark.anyio
async def test_grep_context_uses_dash_lines_and_group_separators(ctx: ToolContext) -> None:
    result = await grep(ctx, pattern="TODO", context=1)
    assert result.output.splitlines() == [
        "README.md-1-# Demo",
        "README.md:2:TODO: write docs",
        "--",
        "src/app.py-3-def main():",
        "src/app.py:4:    # TODO: handle errors",
        "src/app.py-5-    return 1",
    ]


@pytest.mark.anyio
async def test_grep_options(ctx: ToolContext) -> None:
    folded = await grep(ctx, pattern="todo", ignore_case=True, include="*.py")
    assert [line.split(":")[0] for line in folded.output.splitlines()] == [
        "src/app.py",
        "src/util.py",
    ]
    hidden = await grep(ctx, pattern="TODO", hidden=True, output_mode="files")
    assert hidden.output.splitlines() == [".github/workflows/ci.yml", "README.md", "src/app.py"]
    literal = await grep(ctx, pattern="main()", fixed_strings=True, output_mode="count")
    assert literal.output.splitlines() == ["src/app.py:1", "tests/test_app.py:2"]


@pytest.mark.anyio
async def test_grep_on_a_file_or_subdirectory(ctx: ToolContext) -> None:
    one = await grep(ctx, pattern="def", path="src/util.py")
    assert one.output.splitlines() == ["src/util.py:1:def helper():"]
    sub = await grep(ctx, pattern="def", path="tests", output_mode="files")
    assert sub.output.splitlines() == ["tests/test_app.py"]


@pytest.mark.anyio
async def test_grep_limit_says_how_many_more(ctx: ToolContext) -> None:
    content = await grep(ctx, pattern="def", limit=1)
    lines = content.output.splitlines()
    assert lines[0] == "src/app.py:3:def main():"
    assert "2 more matching lines not shown" in lines[1] and "narrow the search" in lines[1]
    files = await grep(ctx, pattern="def", output_mode="files", limit=2)
    assert "1 more files not shown" in files.output.splitlines()[-1]


@pytest.mark.anyio
async def test_grep_no_match_missing_path_and_bad_regex(ctx: ToolContext) -> None:
    none = await grep(ctx, pattern="absent_word")
    assert none.output.startswith("No matches for 'absent_word'")
    assert none.is_error is False
    with pytest.raises(ToolError, match="does not exist"):
        await grep(ctx, pattern="x", path="missing/dir")
    with pytest.raises(ToolError, match="regex parse error") as caught:
        await grep(ctx, pattern="(unclosed")
    assert "unclosed group" in str(caught.value)


@pytest.mark.anyio
async def test_grep_outside_workspace_shows_absolute_paths(
    ctx: ToolContext, tmp_path: Path
) -> None:
    write(tmp_path / "elsewhere", {"f.txt": "needle\n"})
    result = await grep(ctx, pattern="needle", path=str(tmp_path / "elsewhere"))
    assert result.output == f"{(tmp_path / 'elsewhere' / 'f.txt').as_posix()}:1:needle"


@pytest.mark.anyio
async def test_large_output_is_bounded_with_an_artifact(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root, {f"f{i:03}.txt": "needle\n" * 5 for i in range(100)})
    ctx = make_ctx(root, tmp_path / "artifacts", OutputLimits(max_bytes=2000, max_lines=40))
    result = await grep(ctx, pattern="needle", limit=500)
    assert result.artifact is not None and result.artifact.exists()
    assert len(result.output.encode()) < 2600
    assert "omitted" in result.output
    assert result.data is not None and result.data["output_truncated"] is True
    full = result.artifact.read_text().splitlines()
    assert len(full) == 500  # every match, although the model saw only 40 lines
    assert full[0] == "f000.txt:1:needle"


# ----------------------------------------------------------------------- fuzz

_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["*.py", "[", "**", "src", "a(", "\\", ".*", "-v", "{a,b}", "!x"]),
)
_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=3000),
    _text,
    st.sampled_from(["content", "files", "count", "lines"]),
)
_grep_keys = st.sampled_from(
    [
        "pattern",
        "path",
        "include",
        "ignore_case",
        "fixed_strings",
        "context",
        "output_mode",
        "hidden",
        "limit",
        "bogus",
    ]
)
_glob_keys = st.sampled_from(["pattern", "path", "limit", "bogus"])


def _fuzz(tool: GrepTool | GlobTool, raw: dict[str, Any], workspace: Path, tmp: Path) -> None:
    try:
        args = tool.args_model.model_validate(raw)
    except ValidationError:
        return
    ctx = make_ctx(workspace, tmp / "artifacts")

    async def call() -> None:
        try:
            result = await tool.run(args, ctx)  # type: ignore[arg-type]
        except ToolError as exc:
            assert str(exc)
            return
        assert isinstance(result.output, str) and result.output
        json.dumps(result.data)

    anyio.run(call)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.dictionaries(_grep_keys, _values, max_size=9))
def test_fuzz_grep_arguments(raw: dict[str, Any], workspace: Path, tmp_path: Path) -> None:
    _fuzz(GrepTool(), raw, workspace, tmp_path)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.dictionaries(_glob_keys, _values, max_size=4))
def test_fuzz_glob_arguments(raw: dict[str, Any], workspace: Path, tmp_path: Path) -> None:
    _fuzz(GlobTool(), raw, workspace, tmp_path)
