"""Asking the person at the terminal for one line, in a way Ctrl-C always interrupts.

The line is awaited in the event loop (the terminal opened non-blocking and
watched with :func:`anyio.wait_readable`), never read by a worker thread: a
prompt that is cancelled, by Ctrl-C or anything else, leaves nothing blocked
on the terminal. The process can end at once, and the next line the person
types reaches their shell instead of a thread still waiting for it (the
terminal itself drops a half-typed line on Ctrl-C).

Whatever draws on the terminal meanwhile (the live view's running calls)
registers with :func:`on_prompt` and is told when a prompt starts and ends,
so it can step aside and not draw over the question.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

import anyio
import anyio.to_thread

__all__ = ["Segments", "ask_line", "on_prompt", "use_terminal"]

Segments = Sequence[tuple[str, str]]
"""Styled text: (text, rich style) pairs; an empty style is plain."""

_listeners: list[Callable[[bool], None]] = []

_terminal: list[int] = []


def use_terminal(fd: int) -> None:
    """Ask on ``fd`` instead of opening ``/dev/tty``.

    A command run by the command server (:mod:`zuno.cmdserver`) has no controlling
    terminal of its own: it is handed its caller's, already open.
    """
    _terminal[:] = [fd]


def _open_terminal() -> int:
    if _terminal:
        fd = os.dup(_terminal[0])
        os.set_blocking(fd, False)
        return fd
    return os.open("/dev/tty", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)


def on_prompt(listener: Callable[[bool], None]) -> Callable[[], None]:
    """Call ``listener(True)`` before each prompt and ``listener(False)`` after it.

    Returns:
        A function that removes the listener.
    """
    _listeners.append(listener)
    return lambda: _listeners.remove(listener)


def _tell(active: bool) -> None:
    for listener in list(_listeners):
        listener(active)


def _show(prompt: str | Segments) -> None:
    from rich.console import Console
    from rich.text import Text

    text = Text(prompt) if isinstance(prompt, str) else Text.assemble(*prompt)
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    console.print(text, end="")
    sys.stderr.flush()


async def _read_fd(fd: int) -> str:
    while True:
        await anyio.wait_readable(fd)
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            continue  # another reader took it first
        except OSError:
            return ""  # the terminal hung up: no answer
        return data.decode("utf-8", "replace")


async def _read_line() -> str:
    try:
        fd = _open_terminal()
    except OSError:
        fd = None
    if fd is not None:
        try:
            return await _read_fd(fd)
        finally:
            os.close(fd)
    try:
        return await _read_fd(sys.stdin.fileno())
    except (OSError, ValueError):
        # Standard input cannot be watched (a regular file): a thread reads it, and is
        # abandoned if the prompt is cancelled.
        return await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)


async def ask_line(prompt: str | Segments) -> str:
    """Show ``prompt`` on stderr and return the line typed at the terminal ("" at its end).

    Cancellation (Ctrl-C included) ends the wait at once; nothing keeps reading.
    """
    _tell(True)
    try:
        _show(prompt)
        return await _read_line()
    finally:
        _tell(False)
