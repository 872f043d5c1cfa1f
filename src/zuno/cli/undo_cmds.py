"""``zuno diff CALL`` and ``zuno undo [CALL | --to CALL]``: what a call changed, and taking it back.

Both read the checkpoints the dispatcher takes before every side-effecting
call (:mod:`zuno.workspace.checkpoints.store`). ``zuno undo`` dispatches the ``undo`` tool
(:mod:`zuno.tools.undo`) in the workspace's session of direct calls, so the
undo has its own checkpoint, row and events, and can itself be undone. The
person typing the command is the approval: nothing is asked (a deny rule on
``undo`` still refuses it).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from zuno.cli.app import app
from zuno.cli.console import err, out
from zuno.cli.errors import fail, user_errors
from zuno.cli.options import Db, Json, Workspace
from zuno.durability.store import open_store

if TYPE_CHECKING:
    from zuno.contract.calls import CallResult
    from zuno.workspace.checkpoints.store import Change

__all__ = ["diff_command", "undo_command"]

_STATUS_WORDS = {
    "added": "added",
    "deleted": "deleted",
    "modified": "modified",
    "mode": "mode changed",
    "type": "type changed",
}


@app.command("diff")
def diff_command(
    call: Annotated[str, typer.Argument(help="A call id (a unique prefix is enough).")],
    json_: Json = False,
    db: Db = None,
) -> None:
    """What a side-effecting call changed in its workspace, shell commands' effects included.

    The checkpoint taken before CALL is compared with the next one taken in
    that workspace, or with the current state when CALL was the last.
    """
    from zuno.tools.undo import checkpoint_problem, find_call
    from zuno.workspace.checkpoints.store import CheckpointError, checkpoints_of_store

    with user_errors():
        store = open_store(db, migrate=False)  # reads: never changes the schema
    try:
        with user_errors(), _tool_errors():
            found = find_call(store, call)
            workspace = Path(found.workspace)
            problem = checkpoint_problem(store, found, workspace)
            if problem is not None:
                fail(problem)
            assert found.snapshot is not None
            checkpoints = checkpoints_of_store(store, workspace, denied=_denied_in(workspace))
            try:
                after = checkpoints.next_after(found.snapshot)
                then = checkpoints.trailers(after).get("Call") if after else None
                new = after or checkpoints.current_tree()
                changes = checkpoints.changes(found.snapshot, new)
                color = out.is_terminal and not json_
                patch = checkpoints.patch(found.snapshot, new, color=color)
            except CheckpointError as exc:
                fail(str(exc))
    finally:
        store.close()
    if json_:
        payload: dict[str, Any] = {
            "call_id": found.call_id,
            "tool": found.tool,
            "session_id": found.session_id,
            "workspace": found.workspace,
            "before": found.snapshot,
            "after": after,
            "after_call": then,
            "files": [c.as_dict() for c in changes],
            "patch": patch,
        }
        sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
        return
    until = f"the checkpoint before {then}" if then else "the current state"
    out.print(
        f"{found.call_id} ({found.tool}) in {found.workspace}: checkpoint "
        f"{found.snapshot[:12]} compared with {until}",
        markup=False,
        style="bold",
    )
    if not changes:
        out.print("No workspace file changed.", markup=False)
        return
    for change in changes:
        out.print(f"  {_status_word(change):<13} {change.path}", markup=False, highlight=False)
    out.file.flush()
    sys.stdout.write("\n" + patch)
    sys.stdout.flush()


@app.command("undo")
def undo_command(
    call: Annotated[
        str | None,
        typer.Argument(
            help="Revert this call's changes (default: the last call that changed a file "
            "of the workspace, an undo included)."
        ),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="CALL",
            help="Restore the whole workspace to how it was just before CALL "
            "(every later change is reverted).",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Overwrite files that changed again after CALL (default: refuse)."
        ),
    ] = False,
    json_: Json = False,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """Undo a call's effects on the workspace files, from the checkpoint taken before it.

    The undo is recorded as a call (tool `undo`) in the workspace's session of
    direct calls, with a checkpoint of its own: `zuno undo` again undoes it.
    Exit status 1 unless it succeeded.
    """
    from zuno.tools.undo import find_call, last_changing_call
    from zuno.workspace.checkpoints.store import CheckpointError, checkpoints_of_store

    if call is not None and to is not None:
        fail("give CALL or --to CALL, not both")
    ref = to if to is not None else call
    with user_errors():
        store = open_store(db, migrate=False)
    try:
        with user_errors(), _tool_errors():
            if ref is None:
                here = workspace.resolve()
                checkpoints = checkpoints_of_store(store, here)
                try:
                    ref = last_changing_call(store, checkpoints)
                except CheckpointError as exc:
                    fail(str(exc))
                if ref is None:
                    fail(f"nothing to undo: no recorded call changed a file in {here}")
            found = find_call(store, ref)
    finally:
        store.close()
    _dispatch_undo(
        Path(found.workspace),
        db,
        {"call": found.call_id, "scope": "to" if to is not None else "call", "force": force},
        json_,
    )


def _dispatch_undo(
    workspace: Path, db: Path | None, arguments: dict[str, Any], json_: bool
) -> None:
    """Dispatch the ``undo`` tool in the workspace's session of direct calls; print; exit."""
    from zuno.cli.command_runtime import Where, dispatch_now, exit_for, runtime
    from zuno.cli.render import print_result
    from zuno.dispatch.dispatcher import CallRequest
    from zuno.dispatch.registry import Surface, switched

    with runtime(workspace, db, yes=True) as rt:
        tool = rt.registry.get("undo")
        if tool is None or switched(rt.config.tools, "undo") is False:
            fail('the undo tool is switched off ("tools": {"undo": false} in zuno.json)')
        state = Where(None, False, "build").open(rt)
        if state.surface.get("undo") is None:
            # The person asked for this undo: the tool joins the session for it.
            state.surface = Surface((*state.surface.tools, tool), state.surface.withheld)
        results = dispatch_now(rt, state, [CallRequest("undo", arguments)])
        results = [_in_cli_words(r, str(arguments["call"])) for r in results]
        if json_:
            sys.stdout.write(json.dumps(results[0].as_dict(), indent=2, ensure_ascii=False) + "\n")
        else:
            for result in results:
                print_result(out, result)
            err.print(f"[dim]session {state.session_id}[/]")
        exit_for(results)


def _in_cli_words(result: CallResult, call: str) -> CallResult:
    """A refused undo's way out, told in this command's options rather than the tool's."""
    from dataclasses import replace

    from zuno.tools.undo import CONFLICT_FIX

    if CONFLICT_FIX not in result.output:
        return result
    fix = (
        f"Undo the later calls first, or run `zuno undo --to {call}` to restore everything "
        f"as it was before it, or `zuno undo {call} --force` to overwrite them"
    )
    return replace(result, output=result.output.replace(CONFLICT_FIX, fix))


def _denied_in(workspace: Path) -> list[str] | None:
    """The deny patterns on reading in the workspace's config (None: it cannot be read,
    and the store's own record of them holds)."""
    from zuno.config.loading import ConfigError, load_config
    from zuno.workspace.checkpoints.store import denied_patterns

    try:
        return denied_patterns(load_config(workspace).permission.rules)
    except (ConfigError, OSError):
        return None


def _status_word(change: Change) -> str:
    return _STATUS_WORDS[change.status]


@contextmanager
def _tool_errors() -> Generator[None]:
    """Refusals of the undo lookups (an unknown call id) as one line, not a traceback."""
    from zuno.contract.tool import ToolError

    try:
        yield
    except ToolError as exc:
        fail(str(exc))
