"""``zuno server``: the command server's state, and stopping it."""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Annotated, Any

import typer

from zuno.cli.app import app

__all__ = ["server_status", "server_stop"]

server_app = typer.Typer(
    help="The command server that makes short commands start fast (ZUNO_SERVER=off: none).",
    no_args_is_help=True,
)
app.add_typer(server_app, name="server")


def _ask(kind: bytes) -> bytes | None:
    from zuno.launcher import PROTOCOL, pack, receive_frame, send_frame, server_place

    place = server_place()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10.0)
    try:
        sock.connect(place.socket)
        send_frame(sock, pack([PROTOCOL, kind]))
        return receive_frame(sock)
    except (OSError, ValueError):
        return None
    finally:
        sock.close()


def _status() -> dict[str, Any]:
    from zuno.launcher import server_enabled, server_place

    place = server_place()
    answer = _ask(b"status")
    state: dict[str, Any] = {
        "running": False,
        "pid": None,
        "socket": place.socket,
        "served": 0,
        "started": None,
        "idle_exit": None,
        "enabled": server_enabled(),
    }
    if answer is not None:
        try:
            told = json.loads(answer)
        except ValueError:
            told = None
        if isinstance(told, dict):
            state.update(
                running=True,
                pid=told.get("pid"),
                served=told.get("served", 0),
                started=told.get("started"),
                idle_exit=told.get("idle_exit"),
            )
    return state


@server_app.command("status")
def server_status(
    json_: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Whether a command server runs for this Python and package: pid, socket, commands served."""
    state = _status()
    if json_:
        typer.echo(json.dumps(state))
        return
    if not state["enabled"]:
        typer.echo("command server: off (ZUNO_SERVER)")
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
    state = _status()
    if not state["running"]:
        typer.echo("command server: not running")
        return
    _ask(b"stop")
    pid = state["pid"]
    for _ in range(200):  # up to ~10 s for running commands to finish
        try:
            os.kill(int(pid), 0)
        except (OSError, TypeError, ValueError):
            break
        time.sleep(0.05)
    typer.echo(f"command server: stopped (pid {pid})")
