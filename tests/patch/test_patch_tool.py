"""The apply_patch tool: declaration, preview, run and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from patch_support import context_for, snapshot, wrap

from zuno.contract.tool import ToolError
from zuno.core.declarations import Concurrency, Declaration, Effect, Replay
from zuno.tools.patch import ApplyPatchArgs, ApplyPatchTool


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "app.py").write_text("def greet(name):\n    return 'hi ' + name\n")
    return root


PATCH = wrap(
    "*** Update File: app.py",
    "@@ def greet(name):",
    "-    return 'hi ' + name",
    "+    return f'hello {name}'",
    "*** Add File: docs/NOTE.md",
    "+# Note",
)


def test_declaration_is_the_strict_default() -> None:
    tool = ApplyPatchTool()
    args = ApplyPatchArgs(patch=PATCH)
    assert tool.declare(args) == Declaration()
    assert tool.declare(args) == Declaration(
        Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.EXCLUSIVE
    )
    assert tool.name == "apply_patch"
    assert tool.rule_argument is None


def test_description_carries_grammar_and_example() -> None:
    text = ApplyPatchTool.description
    for marker in ("*** Begin Patch", "*** Update File:", "*** Move to:", "@@", "*** End of File"):
        assert marker in text
    assert "Example:" in text
    assert list(ApplyPatchTool().schema()["properties"]) == ["patch"]


def test_preview_is_the_diff_against_current_files(ws: Path) -> None:
    preview = ApplyPatchTool(ws).preview(ApplyPatchArgs(patch=PATCH))
    assert "-    return 'hi ' + name\n+    return f'hello {name}'\n" in preview
    assert "+++ b/docs/NOTE.md" in preview
    assert not (ws / "docs").exists()


def test_preview_reports_the_parse_or_match_error(ws: Path) -> None:
    tool = ApplyPatchTool()
    assert tool.preview(ApplyPatchArgs(patch="nope"), workspace=ws).startswith(
        "apply_patch would fail: the patch must start with"
    )
    bad = wrap("*** Update File: app.py", "-missing", "+x")
    assert "were not found" in tool.preview(ApplyPatchArgs(patch=bad), workspace=ws)


def test_affected_paths_lists_sources_and_targets() -> None:
    patch = wrap("*** Update File: a", "*** Move to: b", "-x", "*** Delete File: c")
    assert ApplyPatchTool().affected_paths(ApplyPatchArgs(patch=patch)) == ["a", "b", "c"]
    assert ApplyPatchTool().affected_paths(ApplyPatchArgs(patch="junk")) == []


@pytest.mark.anyio
async def test_run_applies_and_reports_changes(ws: Path) -> None:
    result = await ApplyPatchTool().run(ApplyPatchArgs(patch=PATCH), context_for(ws))
    assert result.output == "Success. Updated the following files:\nM app.py\nA docs/NOTE.md"
    assert result.data == {
        "changes": [{"status": "M", "path": "app.py"}, {"status": "A", "path": "docs/NOTE.md"}]
    }
    assert (ws / "app.py").read_text().endswith("return f'hello {name}'\n")
    assert (ws / "docs/NOTE.md").read_text() == "# Note\n"


@pytest.mark.anyio
async def test_run_failure_is_a_tool_error_and_changes_nothing(ws: Path) -> None:
    before = snapshot(ws)
    patch = wrap("*** Add File: new.txt", "+x", "*** Delete File: missing.txt")
    with pytest.raises(ToolError, match=r"cannot delete missing.txt: no such file"):
        await ApplyPatchTool().run(ApplyPatchArgs(patch=patch), context_for(ws))
    assert snapshot(ws) == before


@pytest.mark.anyio
async def test_run_refuses_paths_outside(ws: Path) -> None:
    patch = wrap("*** Add File: ../escape.txt", "+x")
    with pytest.raises(ToolError, match=r"outside the workspace"):
        await ApplyPatchTool().run(ApplyPatchArgs(patch=patch), context_for(ws))
    assert not (ws.parent / "escape.txt").exists()
