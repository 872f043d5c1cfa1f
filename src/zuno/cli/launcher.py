"""The ``zuno`` command: run a short command through the warm command server.

Starting Python and importing typer, pydantic, asyncio and the runtime takes
most of a second on a slow machine, every time. So, as Mercurial's ``chg``
does, a short command (``tools``, ``call``, ``show``, ...) is handed to a
server process that has imported all of that once and forks a child per
command (:mod:`zuno.cli.cmdserver`). The child takes this process's descriptors,
working folder, environment, umask and limits, and runs the ordinary command
line code; this process forwards signals to it and exits with its status.

This module and :mod:`zuno.cli.server_wire` (the server's place, identity and
wire format, which it shares with the server) are the whole client, so they
import almost nothing: ``os``, ``sys``, ``socket`` and ``signal``. Whenever the
server cannot be used (none is running yet, it refuses, ``ZUNO_SERVER=off``, a
run folder that is not private) the command runs here, in this process, exactly
as it would without a server. When none was running, one is started in the
background for the next command.

The wire format (both directions, over a Unix stream socket) is a 4-byte
big-endian length followed by that many bytes; a request's descriptors ride on
its first bytes (SCM_RIGHTS). A request is a list of byte strings (see
:func:`pack`); the server answers ``OK <pid>`` or ``NO <reason>``, then, when
the command ends, ``EX <status>`` or ``SG <signal>``.
"""

from __future__ import annotations

import os
import sys

from zuno.cli.server_wire import (
    PROTOCOL,
    SERVED_COMMANDS,
    ServerPlace,
    connect,
    identity,
    may_inspect,
    pack,
    private_folder,
    receive_frame,
    send_frame,
    server_enabled,
    server_place,
)

# No typing import at run time: it alone costs tens of milliseconds here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket


__all__ = ["main"]

FORWARDED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGWINCH")


def _request(argv: list[str], tty: bool) -> bytes:
    import resource

    limits: list[bytes] = []
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            soft, hard = resource.getrlimit(getattr(resource, name))
            limits.append(f"{name}={soft}:{hard}".encode())
    import signal

    ignored = [
        str(int(sig)).encode() for sig in _forwarded() if signal.getsignal(sig) == signal.SIG_IGN
    ]
    umask = os.umask(0)
    os.umask(umask)
    environ = [key + b"=" + value for key, value in os.environb.items()]
    return pack(
        [
            PROTOCOL,
            b"run",
            b"\0".join(identity()),
            os.fsencode(os.getcwd()),
            str(umask).encode(),
            b"tty" if tty else b"-",
            pack([os.fsencode(arg) for arg in argv]),
            pack(environ),
            pack(limits),
            pack(ignored),
            # How Python was started (``python -m zuno`` or the script): click names
            # the program from the ``__main__`` module's package.
            os.fsencode(getattr(sys.modules["__main__"], "__package__", None) or ""),
        ]
    )


def _terminal() -> int | None:
    """This process's controlling terminal, when it is in the terminal's foreground.

    A command in the background must not read the terminal: without a server, the
    kernel would stop it (SIGTTIN); the server's child has no controlling terminal,
    so it is not given one at all.
    """
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


_START = -1
"""What :func:`_serve` returns when no server answered and one should be started."""


def _serve(place: ServerPlace, argv: list[str]) -> int | None:
    """Run argv through the server: its exit status; None (or ``_START``) to run it here."""
    import socket

    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:
        # A closed standard descriptor: the socket would take its number and
        # become the command's stdin or stdout. Run here, as Python would.
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connect(sock, place.socket)
        # The folder is private, so only we can listen there; and the server must be us.
        credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    except OSError:
        sock.close()
        return _START  # none listening (or a dead one's socket): start one
    server_pid = int.from_bytes(credentials[:4], sys.byteorder)
    if int.from_bytes(credentials[4:8], sys.byteorder) != os.getuid() or not may_inspect(
        server_pid
    ):
        sock.close()
        return None
    terminal = _terminal()
    try:
        fds = [0, 1, 2] if terminal is None else [0, 1, 2, terminal]
        send_frame(sock, _request(argv, terminal is not None), fds)
    except OSError:
        sock.close()
        return None
    finally:
        if terminal is not None:
            os.close(terminal)
    try:
        answer = receive_frame(sock)
    except (OSError, ValueError):
        answer = None
    if answer is None or not answer.startswith(b"OK "):
        sock.close()
        # A stale server removes its socket and ends: the next one starts now.
        return None if os.path.exists(place.socket) else _START
    return _follow(sock, int(answer[3:]))


def _follow(sock: socket.socket, child: int) -> int:
    """Pass signals on to the served child until it ends: its status as ours."""
    import contextlib
    import signal

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):  # it has just ended
            os.kill(child, signum)

    def stop(signum: int, _frame: object) -> None:
        forward(signum, _frame)
        os.kill(os.getpid(), signal.SIGSTOP)

    for signum in _forwarded():
        if signal.getsignal(signum) != signal.SIG_IGN:  # ignored by the child too
            signal.signal(signum, forward)
    signal.signal(signal.SIGTSTP, stop)
    signal.signal(signal.SIGCONT, forward)
    try:
        status = receive_frame(sock)
    except (OSError, ValueError):
        status = None
    if status is None:
        sys.stderr.write("zuno: the command server ended before the command did\n")
        return 255
    if status.startswith(b"SG "):
        signum = int(status[3:])
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)
        return 128 + signum  # a signal whose default is not to end (it was caught)
    return int(status[3:])


def _forwarded() -> list[int]:
    import signal

    return [getattr(signal, name) for name in FORWARDED_SIGNALS]


def _start_server(place: ServerPlace) -> None:
    """Start a server in the background: its own session, no descriptors of ours."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.posix_spawn(
            sys.executable,
            # -P: no folder of the caller's (a repository) goes on the server's path.
            [sys.executable, "-P", "-m", "zuno.cli.cmdserver", place.folder, place.key],
            os.environ,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, null, 0),
                (os.POSIX_SPAWN_DUP2, null, 1),
                (os.POSIX_SPAWN_DUP2, null, 2),
            ],
            setsid=True,
        )
    except OSError:
        pass  # no server this time: the command still runs here
    finally:
        os.close(null)


def _wanted(argv: list[str]) -> bool:
    rest = argv[1:]
    if not rest:
        # `zuno` alone on a terminal is a chat: interactive, it keeps its own process.
        return not (os.isatty(0) and os.isatty(1))
    first = rest[0]
    return first in SERVED_COMMANDS or first in {"--help", "-h", "--version"}


def main() -> None:
    """Entry point of the ``zuno`` console script."""
    argv = list(sys.argv)
    start: ServerPlace | None = None
    if server_enabled() and _wanted(argv):
        place = server_place()
        problem = private_folder(place.folder, create=True)
        if problem is not None:
            sys.stderr.write(f"zuno: command server not used: {place.folder}: {problem}\n")
        else:
            status = _serve(place, argv)
            if status == _START:
                start = place
            elif status is not None:
                os._exit(status)
    # Not served: --help and the tool table, unchanged since their last run, come
    # from the startup cache (no typer, no pydantic, no runtime imported).
    from zuno.cli.startup_cache import cached_output, recording_for

    output = cached_output(argv)
    if output is not None and _written(output):
        if start is not None:
            _start_server(start)
        os._exit(0)
    if start is not None:
        import atexit

        # Once this command is done: the server's imports would slow it down now.
        atexit.register(_start_server, start)
    from zuno.cli.main import main as cli_main

    recording = recording_for(argv)
    if recording is None:
        cli_main()
        return
    status: object = 0
    try:
        cli_main()
    except SystemExit as exc:
        status = exc.code
        raise
    except BaseException:
        status = 1
        raise
    finally:
        recording.finish(status)


def _written(output: bytes) -> bool:
    """Write a cached answer to standard output; False when nothing could be written
    (a closed pipe: the command then runs, and fails, as it would without the cache)."""
    view = memoryview(output)
    try:
        while view:
            view = view[os.write(1, view) :]
    except OSError:
        if len(view) == len(output):
            return False
        os._exit(1)  # part of it went out: stop as a broken pipe stops a command
    return True
