"""A command line that names a command builds only that command, and reads the same.

typer builds every command's options before parsing; ``zuno.cli.main.only``
keeps the one the command line names. Its help, its usage errors and its
exit codes must be those of the whole app, for every command there is.
"""

from __future__ import annotations

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from zuno.cli.main import app, only

COMMANDS = sorted(
    info.name or typer.main.get_command_name(info.callback.__name__)
    for info in app.registered_commands
    if info.callback is not None
)


def run(which: typer.Typer, args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(which, args, prog_name="zuno")
    return result.exit_code, result.output


def test_every_command_is_found() -> None:
    assert {"call", "tools", "batch", "run", "undo"} <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_a_named_command_reads_as_in_the_whole_app(name: str) -> None:
    narrowed = only(app, [name])
    assert list(typer.main.get_group(narrowed).commands) == [name]  # the others not built
    for args in ([name, "--help"], [name, "--no-such-option"]):
        assert run(narrowed, args) == run(app, args), args


@pytest.mark.parametrize("first", [[], ["--help"], ["--version"], ["config"], ["cal"]])
def test_anything_else_gets_the_whole_app(first: list[str]) -> None:
    assert only(app, first) is app
