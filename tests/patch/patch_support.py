"""Helpers shared by the patch tests: a tool context and workspace snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import ToolContext
from zuno.workspace.patch.apply import PatchPlan, apply_patch, plan_patch

__all__ = ["apply_in", "context_for", "plan_in", "snapshot", "wrap"]


def context_for(workspace: Path) -> ToolContext:
    """A tool context on ``workspace`` (no configuration needed by these tools)."""
    config: Any = None
    return ToolContext(
        workspace=workspace,
        session_id="s",
        call_id="c",
        attempt=1,
        limits=OutputLimits(),
        artifacts=ArtifactStore(workspace.parent / "artifacts"),
        config=config,
    )


def apply_in(workspace: Path, text: str) -> PatchPlan:
    """Apply a patch inside ``workspace`` through the tool context's path check."""
    return apply_patch(text, context_for(workspace).resolve_writable)


def plan_in(workspace: Path, text: str) -> PatchPlan:
    """Verify a patch inside ``workspace`` without writing."""
    return plan_patch(text, context_for(workspace).resolve_writable)


def wrap(*lines: str) -> str:
    """A patch envelope around ``lines``."""
    return "\n".join(("*** Begin Patch", *lines, "*** End Patch")) + "\n"


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file and folder under ``root`` (folders map to None), for before/after checks."""
    out: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        key = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[key] = b"->" + str(path.readlink()).encode()
        elif path.is_dir():
            out[key] = None
        else:
            out[key] = path.read_bytes()
    return out
