"""The ``zuno`` typer app that every command joins, and its ``--version`` option.

The commands live beside this module, one module per family (``call_cmds``,
``session_cmds``, ``agent_cmds``, ...); each registers itself on :data:`app` when
it is imported. :mod:`zuno.cli.main` imports them all, in ``--help`` order.
"""

from __future__ import annotations

import sys

import typer

__all__ = ["app"]


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
