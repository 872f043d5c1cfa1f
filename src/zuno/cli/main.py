"""The ``zuno`` entry point: every command registered, then only the one asked for built.

:func:`main` builds only the command the command line names (:func:`only`), or
the commands the command server built before it forked (:func:`prebuild`).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from typing import Any

import typer

from zuno.cli.app import app

# Each module registers its commands on the app as it is imported: this order is
# the order in which `zuno --help` lists them (commands first, then groups).
# isort: off
from zuno.cli import call_cmds as call_cmds  # tools, call, batch
from zuno.cli import session_cmds as session_cmds  # sessions, show
from zuno.cli import config_cmds as config_cmds  # doctor; the config group
from zuno.cli import agent_cmds as agent_cmds  # registers commands
from zuno.cli import chat as chat  # registers commands
from zuno.cli import fleet_cmds as fleet_cmds  # registers commands
from zuno.cli import gc as gc  # registers commands
from zuno.cli import mcp_cmds as mcp_cmds  # registers commands
from zuno.cli import memory_cmds as memory_cmds  # registers commands
from zuno.cli import network_cmds as network_cmds  # registers commands
from zuno.cli import server_cmds as server_cmds  # registers commands
from zuno.cli import trust_cmds as trust_cmds  # registers commands
from zuno.cli import undo_cmds as undo_cmds  # registers commands

# isort: on

__all__ = ["app", "main", "only", "prebuild"]


_built: dict[object, Any] = {}


def prebuild() -> None:
    """Build the click commands for plain and rich help once (for the command server).

    typer makes a pydantic adapter for every option each time the command tree is
    built: tens of milliseconds that a forked child need not pay again.
    """
    default_mode = app.rich_markup_mode
    for mode in (default_mode, None):
        app.rich_markup_mode = mode
        _built[mode] = typer.main.get_command(app)
    app.rich_markup_mode = default_mode


def only(typer_app: typer.Typer, first: Sequence[str]) -> typer.Typer:
    """``typer_app`` with only the command ``first`` names, when it names one of its own.

    typer builds every command's options before parsing (a tenth of a cold
    start): a command line that names a command needs only that one, and it
    is built, parsed and shown exactly as in the whole app. Anything else (an
    option, a group such as ``config``, a name that is no command) gets the
    whole app, for its help and its "no such command" suggestions.
    """
    if not first:
        return typer_app
    wanted = [
        info
        for info in typer_app.registered_commands
        if info.callback is not None
        and (info.name or typer.main.get_command_name(info.callback.__name__)) == first[0]
    ]
    if len(wanted) != 1:
        return typer_app
    narrowed = copy.copy(typer_app)
    narrowed.registered_commands = wanted
    narrowed.registered_groups = []
    return narrowed


def main() -> None:
    """Entry point of the console script."""
    # Undecodable bytes in arguments arrive as surrogates; echoing them back
    # must not end the command.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")  # pyright: ignore[reportAttributeAccessIssue]
    # Help and usage errors for a program or a pipe are click's plain text: typer's
    # rich renderer imports rich's markdown and traceback machinery (~150 ms) to draw
    # panels nobody sees. A terminal keeps the rich help.
    from zuno.cli.plain import is_plain
    from zuno.durability.telemetry import export_from_environment

    if is_plain(sys.stdout):
        app.rich_markup_mode = None
    elif len(sys.argv) == 1 and sys.stdin.isatty():
        sys.argv.append("chat")  # `zuno` alone on a terminal: a conversation
    # Spans to a collector only when OTEL_EXPORTER_OTLP_ENDPOINT asks (docs/headless.md).
    stop_exporting = export_from_environment()
    try:
        command = _built.get(app.rich_markup_mode)
        if command is None:
            only(app, sys.argv[1:2])()
        else:
            command()  # built by the command server before it forked (prebuild)
    finally:
        if stop_exporting is not None:
            stop_exporting()  # sends what is still queued
