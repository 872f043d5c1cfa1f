"""``zuno server``: the command server's state, and stopping it."""

from __future__ import annotations

import json
import os
import time
from typing import Annotated

import typer

from zuno.cli.app import app
from zuno.cli.server_wire import ask_server, server_state

__all__ = ["server_status", "server_stop"]

server_app = typer.Typer(
    help="The command server that makes short commands start fast (ZUNO_SERVER=off: none).",
    no_args_is_help=True,
)
app.add_typer(server_app, name="server")


@server_app.command("status")
def server_status(
    json_: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Whether a command server runs for this Python and package: pid, socket, commands served."""
    state = server_state()
    if json_:
        typer.echo(json.dumps(state))
        return
    if not state["enabled"]:
        typer.echo("command server: off (ZUNO_SERVER)")
    if state["problem"]:
        typer.echo(f"command server: not used: {state['folder']}: {state['problem']}")
        return
    if not state["running"]:
        typer.echo(f"command server: not running (socket {state['socket']})")
        return
    since = time.time() - float(state["started"] or time.time())
    typer.echo(
        f"command server: pid {state['pid']}, up {since:.0f} s, {state['served']} commands served, "
        f"ends after {state['idle_exit']:g} s idle (socket {state['socket']})"
    )


@server_app.command("stop")
def server_stop() -> None:
    """Stop the command server (it finishes the commands it runs); fine when none runs."""
    state = server_state()
    if not state["running"]:
        typer.echo("command server: not running")
        return
    ask_server(b"stop")
    pid = state["pid"]
    for _ in range(200):  # up to ~10 s for running commands to finish
        try:
            os.kill(int(pid), 0)
        except (OSError, TypeError, ValueError):
            break
        time.sleep(0.05)
    typer.echo(f"command server: stopped (pid {pid})")
