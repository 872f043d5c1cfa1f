"""Stopping a command cleanly: SIGTERM and SIGHUP end it the way Ctrl-C does.

Without this, a terminal closing or ``kill PID`` ends the interpreter at once:
calls are left ``started`` (settled as uncertain only when the session is next
opened) and, outside bubblewrap, the commands they started keep running. With
it, the running work is cancelled: its process trees are killed and its rows
settled before the command exits.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import TypeVar, TypeVarTuple, cast

__all__ = ["Stopped", "run_until_stopped"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """The command was stopped by a signal, after its work was cancelled and settled."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 plus the signal number."""
        return 128 + self.signum


def run_until_stopped(fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
    """``anyio.run(fn, *args)``, cancelled cleanly by SIGTERM or SIGHUP.

    Raises:
        Stopped: one of those signals arrived (after ``fn`` was cancelled).
        KeyboardInterrupt: Ctrl-C, as ``anyio.run`` raises it.
    """
    import anyio  # imported when a command runs: not for `zuno --help`

    return anyio.run(_watched, fn, args)


async def _watched(fn: Callable[..., Awaitable[T]], args: tuple[object, ...]) -> T:
    received: list[int] = []
    failure: Exception | None = None
    result: T | None = None
    import anyio

    # Listening before the work starts: no window where a signal kills outright.
    with anyio.open_signal_receiver(*_STOP_SIGNALS) as signals:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                async for signum in signals:
                    received.append(signum)
                    tg.cancel_scope.cancel()
                    return

            tg.start_soon(watch)
            try:
                result = await fn(*args)
            except Exception as exc:  # raised as it is, not inside an exception group
                failure = exc
            finally:
                tg.cancel_scope.cancel()  # stop watching
    if failure is not None:
        raise failure
    if received:
        raise Stopped(received[0])
    return cast(T, result)
