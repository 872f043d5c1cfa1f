"""The ``zuno`` command: the typer app every command joins, and its entry point.

The commands live beside this module, one module per family (``call_cmds``,
``session_cmds``, ``agent_cmds``, ...); each registers itself on :data:`app` when
:mod:`zuno.cli` imports it, in the order ``zuno --help`` lists them.
:func:`main` builds only the command the command line names (:func:`only`), or
the commands the command server built before it forked (:func:`prebuild`).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Sequence
from typing import Any

import typer

__all__ = ["app", "main", "only", "prebuild"]


app = typer.Typer(
    name="zuno",
    help="Zuno: the tool runtime for coding agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(wanted: bool) -> None:
    if wanted:
        from zuno.core.installed import installed_version

        sys.stdout.write(f"zuno {installed_version()}\n")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: bool = typer.Option(
        False,
        "--version",
        help="Print Zuno's version and exit.",
        is_eager=True,
        callback=_print_version,
    ),
) -> None:
    """Zuno: the tool runtime for coding agents."""


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
