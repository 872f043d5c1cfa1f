"""zuno.dispatch.landing: a symlink may not redirect a write onto a control file or denied path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from zuno.config.loading import Config
from zuno.config.permission import PermissionRule, PermissionSettings
from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import Tool, ToolArgs, ToolContext
from zuno.dispatch.landing import Redirected
from zuno.tools.edit import EditArgs, EditTool
from zuno.tools.patch import ApplyPatchArgs, ApplyPatchTool
from zuno.tools.write import WriteArgs, WriteTool

TOOLS: dict[str, tuple[Tool[Any], type[ToolArgs]]] = {
    "write": (WriteTool(), WriteArgs),
    "edit": (EditTool(), EditArgs),
    "apply_patch": (ApplyPatchTool(), ApplyPatchArgs),
}


def patch(*lines: str) -> str:
    return "\n".join(("*** Begin Patch", *lines, "*** End Patch")) + "\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "secret").mkdir()
    (root / "secret" / "key").write_text("k\n")
    (root / "site" / "docs").mkdir(parents=True)
    (root / "hooks").symlink_to(".git/hooks")
    (root / "gitdir").symlink_to(".git")
    (root / "vault").symlink_to("secret")
    (root / "docs").symlink_to("site/docs")
    return root


def run(ws: Path, name: str, arguments: dict[str, Any]) -> None:
    deny = PermissionRule(tool="*", pattern="secret/**", action="deny")
    ctx = ToolContext(
        workspace=ws,
        session_id="s",
        call_id="c",
        attempt=1,
        limits=OutputLimits(),
        artifacts=ArtifactStore(ws.parent / "artifacts"),
        config=Config(permission=PermissionSettings(rules=[deny])),
    )
    tool, model = TOOLS[name]
    anyio.run(tool.run, model.model_validate(arguments), ctx)


def tree(folder: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if not p.is_symlink()
    }


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("write", {"path": "hooks/pre-commit", "content": "echo pwned\n"}),
        ("write", {"path": "gitdir/config", "content": "[core]\nfsmonitor = evil\n"}),
        ("write", {"path": "vault/key", "content": "stolen\n"}),
        ("edit", {"path": "gitdir/config", "old_string": "[core]", "new_string": "[x]"}),
        ("apply_patch", {"patch": patch("*** Add File: hooks/post-checkout", "+echo pwned")}),
        ("apply_patch", {"patch": patch("*** Delete File: gitdir/config")}),
        ("apply_patch", {"patch": patch("*** Update File: vault/key", "-k", "+K")}),
    ],
)
def test_a_link_onto_a_protected_path_is_refused(
    ws: Path, name: str, arguments: dict[str, Any]
) -> None:
    before = tree(ws)
    with pytest.raises(Redirected, match="leads through a symlink"):
        run(ws, name, arguments)
    assert tree(ws) == before


def test_an_ordinary_link_is_still_written_through(ws: Path) -> None:
    run(ws, "write", {"path": "docs/a.md", "content": "# A\n"})
    run(ws, "apply_patch", {"patch": patch("*** Add File: docs/b.md", "+# B")})
    assert (ws / "site/docs/a.md").read_text() == "# A\n"
    assert (ws / "site/docs/b.md").read_text() == "# B\n"


def test_a_protected_path_named_directly_is_left_to_the_preflight(ws: Path) -> None:
    # Named as it is, the pre-flight sees it (and asks, or applies the deny rule).
    run(ws, "write", {"path": ".git/hooks/pre-commit", "content": "echo ok\n"})
    assert (ws / ".git/hooks/pre-commit").read_text() == "echo ok\n"
