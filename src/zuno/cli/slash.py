"""The commands typed at the ``zuno chat`` prompt: lines starting with ``/``.

``/undo`` and ``/diff`` run ``zuno undo`` and ``zuno diff`` (the same output,
the undo recorded as a call of its own); ``/sessions`` lists this folder's
sessions as ``zuno sessions`` does. The others change the chat itself: its
permission mode, its model, the session it continues; ``/compact`` has the
model summarise the conversation so far (see :mod:`zuno.agent.compaction`).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rich.text import Text

from zuno.cli.console import lazy_console

if TYPE_CHECKING:
    from zuno.agent.providers import Provider
    from zuno.config.permission import PermissionMode
    from zuno.dispatch.session_state import SessionState
    from zuno.session.runtime import Runtime

__all__ = ["COMMANDS", "ChatSession", "run_command"]


class ChatSession(Protocol):
    """What a command reads and changes of the chat it is typed in (:class:`zuno.cli.chat.Chat`).

    A protocol, so that the commands need not import the chat that runs them.
    """

    rt: Runtime
    agent: str
    model: str
    provider: Provider
    state: SessionState | None
    mode: PermissionMode | None
    max_steps: int | None
    db: Path | None
    leaving: bool
    replaced: list[Provider]


err = lazy_console(stderr=True, highlight=False, soft_wrap=True)

Handler = Callable[["ChatSession", list[str]], Awaitable[None]]


def _say(text: str, style: str = "") -> None:
    err.print(Text(text, style=style))


def _zuno(chat: ChatSession, *args: str) -> None:
    """Run ``zuno ARGS`` on the chat's store and folder, its output straight to the terminal."""
    command = [sys.executable, "-m", "zuno", *args]
    env = dict(os.environ)
    if chat.db is not None:
        env["ZUNO_DB"] = str(chat.db)
    subprocess.run(command, cwd=chat.rt.workspace, env=env, check=False)


async def _undo(chat: ChatSession, args: list[str]) -> None:
    if len(args) > 1:
        _say("usage: /undo [CALL]  (default: the last call that changed a file here)", "yellow")
        return
    _zuno(chat, "undo", *args)


async def _diff(chat: ChatSession, args: list[str]) -> None:
    if len(args) > 1:
        _say("usage: /diff [CALL]  (default: the last call that changed a file here)", "yellow")
        return
    if not args:
        from zuno.tools.undo import last_changing_call
        from zuno.workspace.checkpoints.store import CheckpointError, checkpoints_of_store

        try:
            last = last_changing_call(
                chat.rt.store, checkpoints_of_store(chat.rt.store, chat.rt.workspace)
            )
        except CheckpointError as exc:
            _say(f"no diff: {exc}", "yellow")
            return
        if last is None:
            _say(f"no recorded call changed a file in {chat.rt.workspace}", "yellow")
            return
        args = [last]
    _zuno(chat, "diff", *args)


async def _mode(chat: ChatSession, args: list[str]) -> None:
    from zuno.policy.permissions import MODES

    if len(args) != 1 or args[0] not in MODES:
        _say(f"usage: /mode MODE, one of {', '.join(MODES)}", "yellow")
        return
    mode: PermissionMode = args[0]
    chat.mode = mode
    if chat.state is not None:
        chat.rt.set_mode(chat.state, mode)
    _say(f"permission mode: {mode} (from the next call on)", "green")


async def _model(chat: ChatSession, args: list[str]) -> None:
    from zuno.agent.providers import ProviderError, make_provider

    if len(args) != 1:
        _say(f"usage: /model PROVIDER:MODEL  (now: {chat.model})", "yellow")
        return
    try:
        provider = make_provider(args[0], chat.rt.config.providers)
    except ProviderError as exc:
        _say(f"model not changed: {exc}", "red")
        return
    chat.replaced.append(chat.provider)
    chat.provider, chat.model = provider, args[0]
    if chat.state is not None:
        with chat.rt.store.transaction() as db:
            db.execute(
                "UPDATE sessions SET model = ? WHERE session_id = ?",
                (args[0], chat.state.session_id),
            )
    _say(f"model: {args[0]} (from the next turn on)", "green")


async def _sessions(chat: ChatSession, args: list[str]) -> None:
    _zuno(chat, "sessions", *args)


async def _resume(chat: ChatSession, args: list[str]) -> None:
    from zuno.cli.command_runtime import find_session
    from zuno.durability.store import StoreError
    from zuno.session.lifecycle import UnknownSession

    if len(args) != 1:
        _say("usage: /resume SESSION  (/sessions lists them)", "yellow")
        return
    try:
        record = find_session(chat.rt.store, args[0])
        if not _same_folder(record.workspace, str(chat.rt.workspace)):
            _say(
                f"session {record.session_id} works in {record.workspace}, not here; "
                f"leave and run `zuno resume {record.session_id}`",
                "yellow",
            )
            return
        chat.state = chat.rt.open_session(record.session_id)
    except (UnknownSession, StoreError) as exc:
        _say(f"not resumed: {exc}", "red")
        return
    chat.agent = chat.state.agent_name
    _say(f"continuing session {record.session_id}: {record.title or ''}".rstrip(": "), "green")


def _same_folder(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


async def _cost(chat: ChatSession, args: list[str]) -> None:
    from zuno.cli.agent_options import spent

    if chat.state is None:
        _say("nothing spent yet: no prompt was sent", "dim")
        return
    told = spent(chat.rt, chat.state.session_id)
    _say(told or "nothing spent yet: no model reply so far", "")


async def _compact(chat: ChatSession, args: list[str]) -> None:
    from zuno.agent.compaction import CompactionFailed
    from zuno.agent.loop import AgentLoop

    if chat.state is None:
        _say("nothing to compact: no prompt was sent", "dim")
        return
    loop = AgentLoop(chat.rt, chat.state, chat.provider, max_steps=chat.max_steps)
    try:
        done = await loop.compact(" ".join(args) or None)
    except CompactionFailed as exc:
        _say(f"cannot compact: {exc}", "yellow")
        return
    _say(
        f"compacted: {done.replaced} message(s) now reach the model as one summary "
        f"(compaction {done.number}); zuno show keeps them all",
        "dim",
    )


async def _help(chat: ChatSession, args: list[str]) -> None:
    for name, (_handler, words) in COMMANDS.items():
        _say(f"  /{name:<16}{words}")
    _say("  Esc interrupts a running turn; Ctrl-D leaves.", "dim")


async def _exit(chat: ChatSession, args: list[str]) -> None:
    chat.leaving = True


COMMANDS: dict[str, tuple[Handler, str]] = {
    "undo": (_undo, "[CALL] take back a call's file changes (default: the last one)"),
    "diff": (_diff, "[CALL] what a call changed (default: the last change)"),
    "mode": (_mode, "MODE  plan, accept-edits, strict or permissive"),
    "model": (_model, "PROVIDER:MODEL  the model of the next turns"),
    "sessions": (_sessions, "this folder's sessions"),
    "resume": (_resume, "SESSION  continue another session of this folder here"),
    "cost": (_cost, "tokens and cost of this session so far"),
    "compact": (_compact, "[FOCUS]  summarise the conversation so far to free the context"),
    "help": (_help, "this list"),
    "exit": (_exit, "leave (Ctrl-D too)"),
}
"""Each command: its handler and what /help says of it."""


async def run_command(chat: ChatSession, line: str) -> None:
    """Run the ``/command args`` typed at the prompt (an unknown one is named, with /help)."""
    try:
        words = shlex.split(line[1:])
    except ValueError as exc:
        _say(f"cannot read that command: {exc}", "red")
        return
    name, args = (words[0].lower(), words[1:]) if words else ("help", [])
    found = COMMANDS.get(name)
    if found is None:
        _say(f"unknown command /{name}; /help lists them", "yellow")
        return
    await found[0](chat, args)
