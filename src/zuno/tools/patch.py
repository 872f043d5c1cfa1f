"""The ``apply_patch`` tool: localized, context-verified edits of several files.

The engine is :mod:`zuno.workspace.patch`; this module only adapts it to the tool
contract. The whole patch is verified against the files before anything is
written, and then written all or nothing, so a failed call changed nothing
(unless the write phase itself failed and could not restore, which is reported
as an uncertain outcome).

Permission rules see every path the patch touches (:meth:`ApplyPatchTool.touched_paths`:
each added, updated and deleted file and each move's destination), resolved to
their real locations by the pre-flight: a deny on ``.env`` refuses a patch that
deletes it, moves it away, or moves another file onto it.

An update's hunks are their own check: they are matched against the file's
current lines and written only while the file still holds what they matched,
so they need no prior read. A file the patch replaces or deletes whole
(``Delete File``, ``Add File`` or ``Move to`` onto an existing file) must be one
this session has seen as it is now, checked for all of them before any is
written (see :mod:`zuno.durability.file_versions`); new files need no read.

apply_patch keeps the strict default declaration (SideEffecting / Never / Exclusive).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio.to_thread
from pydantic import Field

from zuno.contract.output import ArtifactStore, OutputLimits
from zuno.contract.tool import (
    ArgumentsRejected,
    Tool,
    ToolArgs,
    ToolContext,
    ToolError,
    ToolResult,
    UncertainOutcome,
)
from zuno.dispatch.landing import LandingGuard, landing_guard
from zuno.durability.file_versions import FileChanged, claim_writes
from zuno.workspace.beneath import EscapesRoot

# The patch engine is imported when a patch is read or applied: describing the tool needs none.
if TYPE_CHECKING:
    from zuno.workspace.patch.apply import PatchPlan, PathResolver

__all__ = ["ApplyPatchArgs", "ApplyPatchTool"]

_DESCRIPTION = """\
Edit files with a patch: add, delete, update and move files in one call. The whole \
patch is checked against the files first and applied all or nothing. Update hunks \
must match the file's current lines (no prior read is needed). A file the patch deletes, \
or replaces whole (Add File or Move to onto an existing file), must have been read in this \
session and be unchanged since; otherwise nothing is applied (read it again).

Grammar:
  *** Begin Patch
  *** Add File: PATH        then lines each starting with + (the new file's content)
  *** Delete File: PATH
  *** Update File: PATH
  *** Move to: NEWPATH      (optional, right after Update File)
  @@ CONTEXT                a line near the change (e.g. the enclosing def/class);
                            several @@ lines narrow step by step; bare @@ also works
   line                     context (space prefix): unchanged, must match the file
  -line                     removed
  +line                     added
  *** End of File           (optional) the chunk ends at the end of the file
  *** End Patch

Give ~3 context lines above and below each change, copied exactly from the file. \
Chunks of one file go in file order. If the lines match several places, add context \
or an @@ line. Paths are relative to the workspace.

Example:
*** Begin Patch
*** Update File: src/app.py
@@ def greet(name):
-    return "hi " + name
+    return f"hello {name}"
*** Add File: docs/NOTE.md
+# Note
*** Delete File: old.txt
*** End Patch"""


class ApplyPatchArgs(ToolArgs):
    """Arguments of ``apply_patch``."""

    patch: str = Field(
        description="The whole patch, from '*** Begin Patch' to '*** End Patch'.",
    )


class ApplyPatchTool(Tool[ApplyPatchArgs]):
    """Apply a patch in the apply_patch format, all or nothing, inside the workspace."""

    name = "apply_patch"
    description = _DESCRIPTION
    writes_files = True
    args_model = ApplyPatchArgs
    rule_match = "path"

    def __init__(self, workspace: Path | None = None) -> None:
        """Create the tool.

        Args:
            workspace: Where :meth:`preview` resolves paths (the dispatcher does
                not pass one to ``preview``); the process's folder when not given.
        """
        self._workspace = workspace

    def preview(self, args: ApplyPatchArgs, workspace: Path | None = None) -> str:
        """The unified diff of the patch against the current files, or why it cannot apply.

        Args:
            args: The validated arguments.
            workspace: Where relative paths start; defaults to the one given at
                construction, then the process's folder.
        """
        from zuno.workspace.patch.apply import plan_patch
        from zuno.workspace.patch.model import PatchError

        base = workspace or self._workspace or Path.cwd()
        try:
            plan = plan_patch(args.patch, _resolver_for(base))
        except PatchError as error:
            return f"apply_patch would fail: {error}"
        return plan.diff

    def affected_paths(self, args: ApplyPatchArgs) -> list[str]:
        """Every path the patch names (sources and move targets), in patch order.

        Returns an empty list for a patch that does not parse.
        """
        from zuno.workspace.patch.model import PatchError, UpdateFile
        from zuno.workspace.patch.parser import parse_patch

        try:
            patch = parse_patch(args.patch)
        except PatchError:
            return []
        paths: list[str] = []
        for op in patch.operations:
            paths.append(op.path)
            if isinstance(op, UpdateFile) and op.move_to is not None:
                paths.append(op.move_to)
        return paths

    def touched_paths(self, args: ApplyPatchArgs) -> list[str]:
        """The paths permission rules are matched against: :meth:`affected_paths`.

        A patch that does not parse touches nothing: it is refused before any write.
        """
        return self.affected_paths(args)

    async def run(self, args: ApplyPatchArgs, ctx: ToolContext) -> ToolResult:
        """Verify and apply the patch; raise :class:`ToolError` with the reason on failure."""
        from zuno.workspace.patch.commit import ChangedMeanwhile
        from zuno.workspace.patch.model import PatchError, PatchWriteError

        ctx.ensure_writes_allowed("files with a patch")  # read-only mode: before even parsing
        try:
            # A large file takes a while to verify; keep the event loop free. The
            # thread is not abandoned on cancellation: a write, once started, finishes.
            check = landing_guard(ctx, self.name)
            plan = await anyio.to_thread.run_sync(_apply, args.patch, ctx, check)
        except ChangedMeanwhile as error:
            raise FileChanged(f"apply_patch: {error}") from error
        except PatchWriteError as error:
            if not error.restored:
                raise UncertainOutcome(f"apply_patch: {error}") from error
            raise ToolError(f"apply_patch: {error}") from error
        except PatchError as error:
            raise ArgumentsRejected(f"apply_patch: {error}") from error
        return ToolResult(plan.output, data={"changes": _changes(plan)})


def _apply(patch: str, ctx: ToolContext, check: LandingGuard) -> PatchPlan:
    """Verify the patch, then write it if this session has seen every file it replaces."""
    from zuno.workspace.patch.apply import plan_patch
    from zuno.workspace.patch.commit import commit_changes
    from zuno.workspace.patch.model import PatchError

    plan = plan_patch(patch, ctx.resolve_writable)
    with claim_writes(ctx, [change.path.path for change in plan.changes]) as claim:
        try:
            commit_changes(plan.changes, check, claim)
        except EscapesRoot as error:
            raise PatchError(f"{error}; nothing was changed") from error
    return plan


def _changes(plan: PatchPlan) -> list[dict[str, str]]:
    return [{"status": line[0], "path": line[2:]} for line in plan.summary]


def _resolver_for(workspace: Path) -> PathResolver:
    """The workspace check of :class:`ToolContext`, for a preview that has no context."""
    ctx = ToolContext(
        workspace=workspace,
        session_id="preview",
        call_id="preview",
        attempt=0,
        limits=OutputLimits(),
        artifacts=ArtifactStore(workspace),
        config=cast(Any, None),  # the path check does not read the configuration
    )
    return ctx.resolve_writable
