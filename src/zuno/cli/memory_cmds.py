"""``zuno memory``: review the memories agents proposed.

``zuno memory list`` shows them; ``zuno memory accept ID`` and
``zuno memory reject ID`` decide one. Only accepted memories reach agents.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from zuno.cli.app import app
from zuno.cli.console import escape, out
from zuno.cli.errors import fail, user_errors
from zuno.cli.options import Db, Json
from zuno.durability.memory import Memory, MemoryStatus, UnknownMemory, decide_memory, list_memories
from zuno.durability.store import open_store

__all__ = ["memory_app"]

memory_app = typer.Typer(
    help="Review memories proposed by agents: list, accept, reject.", no_args_is_help=True
)
app.add_typer(memory_app, name="memory")

MemoryId = Annotated[str, typer.Argument(help="The memory's id, as `zuno memory list` shows it.")]


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def _parse_id(text: str) -> int:
    cleaned = text.strip().lstrip("#")
    if not cleaned.isdigit():
        fail(f"{text!r} is not a memory id; ids are numbers, as `zuno memory list` shows them")
    return int(cleaned)


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M")


def _print_memory(memory: Memory) -> None:
    where = "user (everywhere)" if memory.scope == "user" else f"workspace {memory.workspace}"
    out.print(
        f"[bold]{memory.memory_id}[/] [{memory.status}] {escape(where)}, "
        f"proposed {_when(memory.proposed_at)}",
        markup=True,
    )
    out.print(f"    {memory.text}", markup=False)


@memory_app.command("list")
def list_command(
    status: Annotated[
        str | None,
        typer.Option(
            "--status", help="Only memories with this status: proposed, accepted, rejected."
        ),
    ] = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            "-w",
            help="Only user-scope memories and those of this workspace (default: all).",
        ),
    ] = None,
    json_: Json = False,
    db: Db = None,
) -> None:
    """List memories, oldest first (proposals wait for accept or reject)."""
    if status is not None and status not in ("proposed", "accepted", "rejected"):
        fail(f"--status must be proposed, accepted or rejected, not {status!r}")
    with user_errors():  # a corrupt or unreachable store: one line, exit 2
        store = open_store(db, migrate=False)  # reads: never changes the schema
    try:
        memories = list_memories(store, status=status, workspace=workspace)
    finally:
        store.close()
    if json_:
        _print_json([m.as_dict() for m in memories])
        return
    if not memories:
        out.print("No memories" + (f" with status {status}." if status else "."))
        return
    for memory in memories:
        _print_memory(memory)
    waiting = sum(m.status == "proposed" for m in memories)
    if waiting:
        out.print(
            f"{waiting} waiting: `zuno memory accept ID` or `zuno memory reject ID`.", markup=False
        )


def _decide(memory_id: str, status: MemoryStatus, json_: bool, db: Path | None) -> None:
    number = _parse_id(memory_id)
    with user_errors():  # a corrupt or unreachable store: one line, exit 2
        store = open_store(db)
    try:
        memory, before = decide_memory(store, number, status)
    except UnknownMemory as exc:
        fail(str(exc))
    finally:
        store.close()
    if json_:
        _print_json({**memory.as_dict(), "previous_status": before})
        return
    verb = "accepted" if status == "accepted" else "rejected"
    note = f" (it was {before})" if before != "proposed" else ""
    out.print(f"{verb.capitalize()} memory {memory.memory_id}{note}: {memory.text}", markup=False)


@memory_app.command("accept")
def accept_command(memory_id: MemoryId, json_: Json = False, db: Db = None) -> None:
    """Accept a memory: agents receive it at the start of later sessions."""
    _decide(memory_id, "accepted", json_, db)


@memory_app.command("reject")
def reject_command(memory_id: MemoryId, json_: Json = False, db: Db = None) -> None:
    """Reject a memory: agents never receive it."""
    _decide(memory_id, "rejected", json_, db)
