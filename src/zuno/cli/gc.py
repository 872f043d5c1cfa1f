"""``zuno gc``: free the disk that old sessions' artifacts and checkpoints take.

See :mod:`zuno.durability.artifact_space` for what is removed and what never is.
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Annotated, Any

import typer

from zuno.cli.app import app
from zuno.cli.console import out
from zuno.cli.errors import fail, user_errors
from zuno.cli.options import Db, Json
from zuno.contract.output import format_size
from zuno.durability.store import open_store

__all__ = ["gc", "parse_size"]

_DEFAULT_DAYS = 30.0
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes of a size such as ``500M``, ``2G``, ``1.5GiB`` or ``1048576``.

    Raises:
        ValueError: The text is not such a size.
    """
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a size: give bytes or a number with K, M, G or T")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


@app.command()
def gc(
    older_than: Annotated[
        float | None,
        typer.Option(
            "--older-than",
            min=0,
            metavar="DAYS",
            help=f"Prune sessions idle for longer than DAYS (default {_DEFAULT_DAYS:g} "
            "unless --max-size is given).",
        ),
    ] = None,
    max_size: Annotated[
        str | None,
        typer.Option(
            "--max-size",
            metavar="SIZE",
            help="Then prune the oldest sessions until the artifacts left fit SIZE (500M, 2G).",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")
    ] = False,
    json_: Json = False,
    db: Db = None,
) -> None:
    """Remove old sessions' artifacts, job logs and checkpoints (never a running session's).

    The sessions' rows stay in the store: `zuno show` still tells what they did.
    """
    from zuno.durability.artifact_space import plan_prune

    limit: int | None = None
    if max_size is not None:
        try:
            limit = parse_size(max_size)
        except ValueError as exc:
            fail(f"--max-size: {exc}")
    days = older_than if older_than is not None or limit is not None else _DEFAULT_DAYS
    with user_errors():
        store = open_store(db, migrate=False)  # rows are only read
    try:
        with user_errors():
            plan = plan_prune(store, now=time.time(), older_than_days=days, max_bytes=limit)
            failed = [] if dry_run else plan.apply(store)
    finally:
        store.close()
    if json_:
        report: dict[str, Any] = {
            "dry_run": dry_run,
            "removed" if not dry_run else "would_remove": [
                {"path": str(r.path), "bytes": r.size, "of": r.why} for r in plan.removals
            ],
            "bytes": plan.total,
            "kept_in_use": plan.kept_busy,
            "failed": [str(r.path) for r in failed],
        }
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        verb = "would remove" if dry_run else "removed"
        for removal in plan.removals:
            out.print(
                f"{verb} {format_size(removal.size):>10}  {removal.path}  ({removal.why})",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
        total = f"{len(plan.removals)} item(s), {format_size(plan.total)}"
        out.print(f"{verb}: {total}", markup=False, highlight=False)
        if plan.kept_busy:
            out.print(
                f"left alone (running or queued): {', '.join(plan.kept_busy)}",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    if failed:
        fail(
            "could not remove "
            + ", ".join(str(r.path) for r in failed)
            + ": check their permissions and run zuno gc again",
            code=1,
        )
