"""``undo``: put the workspace back as a checkpoint recorded it.

The dispatcher takes a checkpoint before every side-effecting call
(:mod:`zuno.workspace.checkpoints.store`); this tool restores from them. It is a call like
any other: side-effecting, never replayed, exclusive. So it gets its own
checkpoint first (the state it replaces), its own row and events, and can
itself be undone.

Two scopes:

- ``call`` (default): put back only the paths that call changed, each as it
  was just before the call. What the call changed is the difference between
  its checkpoint and the next one taken in the workspace (or the state when
  this undo began, when it was the last). Refused, naming the paths, when any
  of them changed again after the call, unless ``force``.
- ``to``: the whole workspace as it was just before that call. Every later
  change, by calls or by hand, is reverted; nothing is lost, since this
  undo's own checkpoint holds what it replaced (undo the undo to get it back).

The tool is not on the default surface: the user reaches it through
``zuno undo``, a configuration through ``"tools": {"undo": true}``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import anyio
from pydantic import Field

from zuno.contract.tool import (
    ArgumentsRejected,
    Tool,
    ToolArgs,
    ToolContext,
    ToolResult,
    ToolUnavailable,
    UncertainOutcome,
)
from zuno.workspace.checkpoints.store import (
    Change,
    CheckpointError,
    Checkpoints,
    Entry,
    checkpoints_of_store,
)

__all__ = [
    "CONFLICT_FIX",
    "CheckpointedCall",
    "UndoArgs",
    "UndoPlan",
    "UndoTool",
    "checkpoint_problem",
    "find_call",
    "last_changing_call",
    "plan_undo",
]

_SHOWN = 50  # paths listed in a result; the rest are counted

CONFLICT_FIX = (
    'Undo the later calls first, use scope "to" to restore everything as it was before it, '
    "or force to overwrite them"
)
"""How the model gets past a refused undo (``zuno undo`` says it in its own options)."""


class UndoArgs(ToolArgs):
    """Arguments of ``undo``."""

    call: str = Field(
        min_length=1,
        max_length=200,
        description="The id of an earlier side-effecting call: your own tool-call id from "
        "this session, or Zuno's call id (a unique prefix of at least 4 characters is enough).",
    )
    scope: Literal["call", "to"] = Field(
        default="call",
        description="call (default): put back only the files that call changed. "
        "to: restore the whole workspace to how it was just before that call, "
        "reverting every later change too.",
    )
    force: bool = Field(
        default=False,
        description="scope call: overwrite files that changed again after that call "
        "(default: refuse and name them).",
    )


@dataclass(frozen=True, slots=True)
class CheckpointedCall:
    """A stored call as an undo or a diff sees it."""

    call_id: str
    session_id: str
    tool: str
    effect: str | None
    snapshot: str | None
    workspace: str


def find_call(store: Any, ref: str, *, session_id: str | None = None) -> CheckpointedCall:
    """The call ``ref`` names (its first attempt's row).

    ``ref`` is, in this order of precedence: Zuno's call id; the model's own
    tool-call id (the newest call of ``session_id`` that the model gave this
    id, or, without a session, the one call in the store with it); a prefix
    of Zuno's call id, at least 4 characters long.

    Raises:
        ArgumentsRejected: No call matches, or several do.
    """
    sql = (
        "SELECT c.call_id, c.session_id, c.tool, c.effect, c.snapshot, s.workspace"
        " FROM calls c JOIN sessions s ON s.session_id = c.session_id"
        " WHERE {} ORDER BY c.call_id, c.attempt"
    )
    rows = store.query(sql.format("c.call_id = ?"), (ref,))
    if not rows:
        rows = _by_model_id(store, sql, ref, session_id)
    if not rows and len(ref) >= 4:
        rows = store.query(sql.format("substr(c.call_id, 1, ?) = ?"), (len(ref), ref))
    ids = list(dict.fromkeys(str(r[0]) for r in rows))
    if not ids:
        raise ArgumentsRejected(
            f"no call {ref!r}; give your own tool-call id from this session or Zuno's call id "
            "(`zuno show SESSION` lists a session's calls)"
        )
    if len(ids) > 1:
        raise ArgumentsRejected(
            f"the call prefix {ref!r} is ambiguous: it matches {len(ids)} calls "
            f"({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''}); give more of the id"
        )
    row = rows[0]
    return CheckpointedCall(
        str(row[0]),
        str(row[1]),
        str(row[2]),
        row[3],
        row[4],
        str(row[5]),
    )


def _by_model_id(store: Any, sql: str, ref: str, session_id: str | None) -> list[Any]:
    """The rows of the call the model named ``ref``: in ``session_id`` its newest one."""
    if session_id is not None:
        rows = store.query(
            sql.format("c.model_call_id = ? AND c.session_id = ?").replace(
                "ORDER BY c.call_id", "ORDER BY c.call_id DESC"
            ),
            (ref, session_id),
        )
        newest = rows[0][0] if rows else None
        return [r for r in rows if r[0] == newest]
    return store.query(sql.format("c.model_call_id = ?"), (ref,))


def last_changing_call(store: Any, checkpoints: Checkpoints, limit: int = 200) -> str | None:
    """The newest call of the workspace whose checkpoint differs from the next one.

    Calls that changed nothing are passed over: a refused (``blocked``) call,
    a command that only looked. The last call is compared with the current
    state. None when none of the newest ``limit`` checkpoints changed anything.
    """
    history = checkpoints.history(limit)
    if not history:
        return None
    following = checkpoints.current_tree()
    for _commit, tree, call_id in history:
        changed = tree != following
        following = tree
        if not changed or call_id is None:
            continue
        rows = store.query(
            "SELECT outcome FROM calls WHERE call_id = ? ORDER BY attempt", (call_id,)
        )
        if rows and all(r[0] == "blocked" for r in rows):
            continue  # refused before it ran: what changed since was done by hand
        return call_id
    return None


def checkpoint_problem(store: Any, call: CheckpointedCall, workspace: Path) -> str | None:
    """Why ``call`` has no checkpoint to go back to in ``workspace``, or None when it has."""
    if os.path.realpath(call.workspace) != os.path.realpath(workspace):
        return (
            f"{call.call_id} ran in the workspace {call.workspace}, not in {workspace}; "
            "undo it from that workspace"
        )
    if call.effect != "side_effecting":
        return f"{call.call_id} ({call.tool}) is {call.effect or 'not run'}: it changed no files"
    if call.snapshot is None and _changes_no_files(call.tool):
        return (
            f"{call.call_id} ({call.tool}) changes only Zuno's own record of the session "
            "(its plan, todo list or goal), not workspace files, so there is nothing to diff "
            f"or undo; `zuno show {call.session_id}` shows what it did"
        )
    if call.snapshot is None:
        rows = store.query(
            "SELECT data FROM events WHERE call_id = ? AND kind = 'checkpoint.failed'",
            (call.call_id,),
        )
        pending = store.query(
            "SELECT 1 FROM events WHERE call_id = ? AND kind = 'checkpoint.pending'",
            (call.call_id,),
        )
        if pending and not rows:
            return (
                f"the checkpoint before {call.call_id} ({call.tool}) waits for the session's "
                "first look at the workspace to end; try again shortly (if that session's "
                "process ended first, no checkpoint was written and it cannot be undone)"
            )
        why = f": {_reason(rows[0][0])}" if rows else " (checkpoints were off, or it ran before)"
        return f"no checkpoint was taken before {call.call_id} ({call.tool}){why}"
    return None


@dataclass(frozen=True, slots=True)
class UndoPlan:
    """What an undo would do: each path's target (None: absent), and the conflicts."""

    targets: dict[str, Entry | None]
    changes: list[Change]
    """What the call changed (scope ``call``), or every difference (scope ``to``)."""
    conflicts: list[str]
    """Paths the call changed that changed again after it (scope ``call`` only)."""


def plan_undo(
    checkpoints: Checkpoints, before: str, current: str, scope: Literal["call", "to"]
) -> UndoPlan:
    """Plan undoing the call whose checkpoint is ``before``, from the state ``current``.

    Args:
        checkpoints: The workspace's shadow store.
        before: The checkpoint taken just before the call.
        current: The checkpoint of the state now (the undo's own).
        scope: ``call`` or ``to`` (see the module's docstring).
    """
    if scope == "to":
        changes = checkpoints.changes(current, before)
        return UndoPlan({c.path: c.new for c in changes}, changes, [])
    after = checkpoints.next_after(before) or current
    changes = checkpoints.changes(before, after)
    later: set[str] = set()
    if after != current:
        later = {c.path for c in checkpoints.changes(after, current)}
    conflicts = sorted(c.path for c in changes if c.path in later)
    return UndoPlan({c.path: c.old for c in changes}, changes, conflicts)


class UndoTool(Tool[UndoArgs]):
    """Restore the workspace from the checkpoint taken before an earlier call."""

    name: ClassVar[str] = "undo"
    description: ClassVar[str] = (
        "Undo the workspace changes of an earlier side-effecting call, from the checkpoint "
        "Zuno took just before it (edits made through shell, execute and bg commands are "
        'covered as well as file tools). scope "call" (default) puts back only the files that '
        "call changed; it is refused, naming them, when any changed again later, unless force "
        'is true. scope "to" restores the whole workspace to how it was just before that call, '
        "reverting every later change. Not covered: files ignored by .gitignore, empty "
        "folders, .git folders. The undo is itself a call and can be undone."
    )
    args_model = UndoArgs
    rule_argument: ClassVar[str | None] = "call"
    checks_state_first: ClassVar[bool] = True  # every restored file is checked against the chain

    async def run(self, args: UndoArgs, ctx: ToolContext) -> ToolResult:
        own: str | None = ctx.extra.get("snapshot")
        if own is None:
            raise ToolUnavailable(
                "no checkpoint of the current state could be taken before this undo (see the "
                "checkpoint.failed event), so it could not itself be undone"
            )
        store = ctx.services.store
        target = find_call(store, args.call, session_id=ctx.session_id)
        problem = checkpoint_problem(store, target, ctx.workspace)
        if problem is not None:
            raise ArgumentsRejected(problem)
        assert target.snapshot is not None
        checkpoints = checkpoints_of_store(store, ctx.workspace)
        before = target.snapshot
        try:
            plan = await anyio.to_thread.run_sync(
                lambda: plan_undo(checkpoints, before, own, args.scope)
            )
        except CheckpointError as exc:
            raise ToolUnavailable(str(exc)) from exc
        if plan.conflicts and not args.force:
            raise ArgumentsRejected(
                f"{len(plan.conflicts)} file(s) that {target.call_id} ({target.tool}) changed "
                f"changed again after it: {_listed(plan.conflicts)}. {CONFLICT_FIX}"
            )
        if not plan.targets:
            what = "changed no file" if args.scope == "call" else "left the workspace as it is"
            return ToolResult(
                f"Nothing to undo: {target.call_id} ({target.tool}) {what} "
                f"(checkpoint {before[:12]}).",
                data={"undone_call": target.call_id, "scope": args.scope, "paths": []},
            )
        try:
            done = await anyio.to_thread.run_sync(lambda: checkpoints.restore(plan.targets))
        except (CheckpointError, OSError) as exc:
            raise UncertainOutcome(
                f"restoring stopped part way ({exc}); the checkpoint {own[:12]} taken before "
                "this undo holds the state it started from: undo this call to go back to it"
            ) from exc
        lines = [
            f"Undid {target.call_id} ({target.tool}): "
            + (
                "its changes are reverted"
                if args.scope == "call"
                else "the workspace is as it was just before it"
            )
            + f" ({len(done.written)} restored, {len(done.removed)} removed).",
        ]
        shown = [f"restored {p}" for p in done.written] + [f"removed {p}" for p in done.removed]
        shown += [f"skipped {p} (a nested repository)" for p in done.skipped]
        shown += [
            f"cannot restore {p}: it was larger than the checkpoint size limit, so only its "
            "size and SHA-256 were recorded"
            for p in done.too_large
        ]
        lines += [f"  {line}" for line in shown[:_SHOWN]]
        if len(shown) > _SHOWN:
            lines.append(f"  ... and {len(shown) - _SHOWN} more")
        return ToolResult(
            "\n".join(lines),
            data={
                "undone_call": target.call_id,
                "scope": args.scope,
                "checkpoint": before,
                "restored": done.written,
                "removed": done.removed,
                "skipped": done.skipped,
                "too_large": done.too_large,
            },
        )


def _changes_no_files(tool: str) -> bool:
    """Whether the built-in ``tool`` keeps its effect in the store, never in workspace files."""
    from zuno.dispatch.registry import import_factory
    from zuno.session.builtin_tools import BUILTINS

    home = next((b.home for b in BUILTINS if b.name == tool), None)
    if home is None:
        return False
    return getattr(import_factory(home), "changes_workspace", True) is False


def _listed(paths: list[str], limit: int = 10) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _reason(data: Any) -> str:
    import json

    try:
        return str(json.loads(data).get("reason") or "unknown")
    except (ValueError, AttributeError):
        return "unknown"
