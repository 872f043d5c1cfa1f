"""Esc during a turn of ``zuno chat``: the key that interrupts the running turn.

While a turn runs, the terminal is put in cbreak mode (keys arrive one by one,
not echoed; Ctrl-C still sends SIGINT) and read in the event loop. Escape
alone calls back; an arrow or function key (Escape followed by ``[`` or
``O``) does not, and other keys are dropped. Whenever a prompt asks something
(:func:`zuno.core.tty.on_prompt`) the watcher lets go: the terminal's own mode comes
back for the prompt, and nothing is read until it is answered.
"""

from __future__ import annotations

import os
import termios
from collections.abc import Callable

import anyio

from zuno.core.tty import on_prompt

__all__ = ["watch_escape"]

_PAUSE_S = 0.05


async def watch_escape(on_escape: Callable[[], None]) -> None:
    """Call ``on_escape`` when Escape is pressed, until cancelled (no terminal: wait)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        await anyio.sleep_forever()
        return
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
        os.close(fd)
        await anyio.sleep_forever()
        return
    keys = termios.tcgetattr(fd)
    keys[3] &= ~(termios.ICANON | termios.ECHO)
    keys[6][termios.VMIN], keys[6][termios.VTIME] = 1, 0
    paused = False

    def prompting(active: bool) -> None:
        nonlocal paused
        paused = active
        termios.tcsetattr(fd, termios.TCSANOW, saved if active else keys)

    unlisten = on_prompt(prompting)
    termios.tcsetattr(fd, termios.TCSANOW, keys)
    try:
        while True:
            await anyio.wait_readable(fd)
            if paused:
                await anyio.sleep(_PAUSE_S)  # the prompt reads what was typed
                continue
            try:
                data = os.read(fd, 1024)
            except BlockingIOError:
                continue
            except OSError:
                await anyio.sleep_forever()
                return
            if data.startswith(b"\x1b") and data[1:2] not in (b"[", b"O"):
                on_escape()
                return
    finally:
        unlisten()
        termios.tcsetattr(fd, termios.TCSANOW, saved)
        os.close(fd)
