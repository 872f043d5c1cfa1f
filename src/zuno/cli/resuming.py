"""Which stored session a resume continues, and in which folder.

``zuno resume`` (live or ``--json``) reads the session before it opens a
runtime, since the session decides the folder: its own, or the one
``--move-to`` names (the model is told of a move).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from zuno.cli.console import lazy_console
from zuno.contract.events import Event
from zuno.durability.store import SessionRecord

if TYPE_CHECKING:
    from zuno.session.runtime import Runtime

__all__ = ["ResumeRefused", "move_session", "resume_folder", "stored_session"]

err = lazy_console(stderr=True, highlight=False, soft_wrap=True)


class ResumeRefused(Exception):
    """A resume that cannot go ahead as asked (the folder), with what to do instead."""


def stored_session(prefix: str, db: Path | None) -> SessionRecord:
    """The stored session ``prefix`` names (read before the runtime: it decides the folder).

    Raises:
        UnknownSession: No session, or several, match ``prefix``.
        StoreError: The store cannot be read.
    """
    from zuno.cli.command_runtime import find_session
    from zuno.durability.store import open_store

    store = open_store(db)
    try:
        return find_session(store, prefix)
    finally:
        store.close()


def resume_folder(
    session_id: str, home: Path, workspace: Path | None, move_to: Path | None
) -> Path:
    """The folder a resumed session works in: its own, unless ``--move-to`` names another.

    Raises:
        ResumeRefused: The folders given cannot be used, with what to give instead.
    """
    if workspace is not None and workspace.resolve() != home:
        if move_to is None:
            raise ResumeRefused(
                f"session {session_id} works in {home}, not {workspace.resolve()}: "
                f"`zuno resume {session_id}` continues it there from any folder; "
                f"`--move-to {workspace}` moves it (the model is told)"
            )
        if move_to.resolve() != workspace.resolve():
            raise ResumeRefused(
                "--workspace and --move-to name different folders: give only --move-to"
            )
    if move_to is not None:
        target = move_to.resolve()
        if not target.is_dir():
            raise ResumeRefused(f"--move-to {move_to}: not a folder")
        return target
    if not home.is_dir():
        raise ResumeRefused(
            f"the workspace of session {session_id}, {home}, is not a folder any more; "
            f"`zuno resume {session_id} --move-to DIR` continues it in another folder"
        )
    return home


def move_session(rt: Runtime, session_id: str, home: Path, target: Path) -> None:
    """Record that the session now works in ``target``, and say so to the person."""
    with rt.store.transaction() as db:
        db.execute(
            "UPDATE sessions SET workspace = ? WHERE session_id = ?", (str(target), session_id)
        )
    from rich.text import Text

    rt.events.emit(Event("session.moved", session_id, data={"from": str(home), "to": str(target)}))
    err.print(
        Text.assemble(
            ("moved: ", "yellow"),
            f"session {session_id} now works in {target} (it worked in {home}); the model is told.",
        ),
        highlight=False,
    )
