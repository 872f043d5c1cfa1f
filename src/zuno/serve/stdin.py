"""The stdio server's input, read so that a stop is not held up by a silent client.

The SDK reads stdin in a worker thread, and a thread blocked in ``readline``
cannot be cancelled: SIGTERM (which Zuno turns into a cancellation, see
:mod:`zuno.cli.signals`) would wait until the client wrote a line or closed
the pipe. :func:`claimed_stdin` reads the same descriptor without blocking,
waiting for it to become readable in the event loop, where a cancellation
ends the wait at once.

Like the SDK, it takes descriptor 0 for the protocol alone while serving:
descriptor 0 points at the null device meanwhile (what a child process or a
stray library reads is not the client's messages), and is restored after.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import AsyncIterator, Generator
from contextlib import contextmanager

import anyio

__all__ = ["StdinLines", "claimed_stdin"]

_CHUNK = 65536


class StdinLines:
    """The lines of a descriptor, as text, for ``async for`` (each ends with its ``\\n``).

    The descriptor is put in non-blocking mode; a descriptor that cannot be
    waited on (a regular file) never has to be: its reads do not block.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._pending = b""
        self._ended = False
        os.set_blocking(fd, False)

    def __aiter__(self) -> AsyncIterator[str]:
        return self

    async def __anext__(self) -> str:
        while True:
            end = self._pending.find(b"\n")
            if end >= 0:
                line, self._pending = self._pending[: end + 1], self._pending[end + 1 :]
                return line.decode("utf-8", errors="replace")
            if self._ended:
                if self._pending:
                    line, self._pending = self._pending, b""
                    return line.decode("utf-8", errors="replace")
                raise StopAsyncIteration
            await self._fill()

    async def _fill(self) -> None:
        while True:
            try:
                data = os.read(self._fd, _CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            if data:
                self._pending += data
            else:
                self._ended = True
            return


@contextmanager
def claimed_stdin() -> Generator[StdinLines | None]:
    """Descriptor 0's lines, with descriptor 0 itself pointing at the null device meanwhile.

    None when descriptor 0 is not open (nothing to read; the SDK's own reader
    then reports it). Its blocking mode is restored after: a terminal's
    descriptor is shared with the shell that started Zuno.
    """
    try:
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        yield None
        return
    blocking = os.get_blocking(private)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield StdinLines(private)
    finally:
        os.set_blocking(private, blocking)
        os.dup2(private, 0)
        os.close(private)
