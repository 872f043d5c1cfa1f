"""Run one command through the shell tool under given sandbox settings (for sandbox tests).

The tool is called directly, with a context whose configuration holds only the
``sandbox`` section: these tests judge the sandbox, not the dispatcher.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

from zuno.config.sandbox import SandboxSettings
from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import ToolContext, ToolResult
from zuno.tools.shell import ShellArgs, ShellTool

__all__ = ["run_shell"]


@dataclass
class _Config:
    sandbox: SandboxSettings


async def run_shell(
    workspace: Path,
    artifacts: Path,
    command: str,
    *,
    limit: int = 60,
    extra: dict[str, object] | None = None,
    **settings: object,
) -> ToolResult:
    """The shell tool's result for command in workspace, under ``sandbox`` settings.

    ``extra`` is the call context's ``extra`` (per-call state such as network grants).
    """
    ctx = ToolContext(
        workspace=workspace,
        session_id="s",
        call_id=uuid.uuid4().hex,
        attempt=1,
        limits=OutputLimits(),
        artifacts=ArtifactStore(artifacts),
        config=_Config(SandboxSettings.model_validate(settings)),  # type: ignore[arg-type]
        extra=dict(extra or {}),
    )
    return await ShellTool().run(ShellArgs(command=command, timeout=limit), ctx)
