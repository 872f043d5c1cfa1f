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

import atexit
import os
import sys
import termios
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.to_thread

__all__ = ["Segments", "ask_key", "ask_line", "on_prompt", "use_terminal"]

Segments = Sequence[tuple[str, str]]
"""Styled text: (text, rich style) pairs; an empty style is plain."""

_listeners: list[Callable[[bool], None]] = []

_terminal: list[int] = []


def use_terminal(fd: int) -> None:
    """Ask on ``fd`` instead of opening ``/dev/tty``.

    A command run by the command server (:mod:`zuno.cli.cmdserver`) has no controlling
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
    _give_echo_back()  # the line typed is echoed as it is typed
    try:
        fd = _open_terminal()
    except OSError:
        fd = None
    if fd is not None:
        try:
            while True:
                data = await _read_fd(fd)
                line = _without_habitual_enter(data)
                if line or not data:
                    return line
        finally:
            os.close(fd)
    try:
        return await _read_fd(sys.stdin.fileno())
    except (OSError, ValueError):
        # Standard input cannot be watched (a regular file): a thread reads it, and is
        # abandoned if the prompt is cancelled.
        return await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)


_ENTER_GRACE_S = 2.0
"""After a one-key answer, an Enter pressed out of habit within this long is dropped."""
_key_answered: list[float] = []

_echo_lock = threading.Lock()
_echo_owed: list[list[Any]] = []
"""The terminal's settings to put back once the grace after a one-key answer is over."""


def _settle_quietly(fd: int, saved: list[Any]) -> None:
    """Put the terminal back after a one-key answer, but not its echo, for a moment.

    An Enter pressed out of habit after the key would otherwise be echoed by the
    terminal itself, wherever the cursor is then (in the middle of the model's
    streamed text). Echo comes back after the grace, at the next prompt, or when
    the process ends, whichever is first.
    """
    settled = [*saved[:3], saved[3] & ~termios.ECHO, *saved[4:]]
    termios.tcsetattr(fd, termios.TCSANOW, settled)
    if not saved[3] & termios.ECHO:
        return
    with _echo_lock:
        _echo_owed[:] = [saved]
    timer = threading.Timer(_ENTER_GRACE_S, _give_echo_back)
    timer.daemon = True
    timer.start()


def _give_echo_back() -> None:
    """Restore the settings a one-key answer left without echo (if still owed)."""
    with _echo_lock:
        if not _echo_owed:
            return
        saved = _echo_owed.pop()
        try:
            fd = _open_terminal()
        except OSError:
            return
        try:
            termios.tcsetattr(fd, termios.TCSANOW, saved)
        except termios.error:
            pass
        finally:
            os.close(fd)


atexit.register(_give_echo_back)


def _without_habitual_enter(data: str) -> str:
    """``data`` less the Enter that followed a one-key answer just before (once)."""
    if not _key_answered:
        return data
    answered = _key_answered.pop()
    if time.monotonic() - answered > _ENTER_GRACE_S:
        return data
    return data[1:] if data[:1] in ("\r", "\n") else data


async def _read_key(keys: str) -> str:
    """One key of ``keys`` (lowercased) typed at the terminal, without Enter; "" at its end."""
    try:
        fd = _open_terminal()
    except OSError:
        fd = None
    if fd is None or not os.isatty(fd):
        if fd is not None:
            os.close(fd)
        line = (await _read_line()).strip().lower()
        return line[:1] if line[:1] in keys else (line[:1] or "")
    try:
        _give_echo_back()
        saved = termios.tcgetattr(fd)
        quiet = termios.tcgetattr(fd)
        quiet[3] &= ~(termios.ICANON | termios.ECHO)  # one key at a time, not echoed
        quiet[6][termios.VMIN], quiet[6][termios.VTIME] = 1, 0
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
        try:
            while True:
                data = await _read_fd(fd)
                if not data:
                    return ""
                if data == "\x1b":  # Escape alone (not the start of an arrow key): no
                    return "\x1b"
                for char in data.lower():
                    if char in keys:
                        _key_answered[:] = [time.monotonic()]
                        return char
        finally:
            _settle_quietly(fd, saved)
    finally:
        os.close(fd)


async def ask_key(prompt: str | Segments, keys: str) -> str:
    """Show ``prompt`` on stderr and return the first key of ``keys`` pressed (no Enter).

    Other keys, and an Enter, are ignored. Escape alone returns ``"\\x1b"``; the
    terminal's end returns "". Without a terminal a line is read and its first
    character returned. Ctrl-C interrupts as at :func:`ask_line`.
    """
    _tell(True)
    try:
        _show(prompt)
        key = await _read_key(keys)
        sys.stderr.write((key if key.isprintable() else "") + "\n")
        sys.stderr.flush()
        return key
    finally:
        _tell(False)


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
