"""The forked child of the command server: it becomes the caller and runs its command.

It takes the caller's limits, folder, descriptors (and terminal), environment,
umask, argv and ``__main__``, builds fresh standard streams on them, dies the
moment the caller does, and runs :func:`zuno.cli.main.main` as the ``zuno``
script would, ending as Python would end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys

from zuno.cli.server_request import Request

__all__ = ["REFUSED_IN_CHILD", "run_command", "take_caller", "watch_caller"]


REFUSED_IN_CHILD = 199  # not an exit status of zuno's: the child could not become the caller


def take_caller(request: Request) -> str | None:
    """Become the caller: its descriptors, folder, environment, umask, limits and streams.

    Returns why not, when something of the caller's cannot be had here (the
    caller then runs the command itself).
    """
    import resource

    for name, (soft, hard) in request.limits.items():
        resource_id = getattr(resource, name, None)
        if resource_id is None:
            continue
        try:
            resource.setrlimit(resource_id, (soft, hard))
        except (OSError, ValueError) as error:
            return f"cannot set the caller's {name} ({soft}, {hard}): {error}"
    try:
        os.chdir(request.cwd)
    except OSError as error:
        return f"cannot enter the caller's folder: {error.strerror}"
    for target, fd in enumerate(request.fds[:3]):
        os.dup2(fd, target)
    if request.tty:
        from zuno.core.tty import use_terminal

        use_terminal(os.dup(request.fds[3]))
    for fd in request.fds:
        os.close(fd)
    os.environ.clear()
    for key, value in request.environb.items():
        # A name the C library cannot hold (an empty one): a fresh process has none.
        with contextlib.suppress(ValueError):
            os.environb[key] = value
    os.umask(request.umask)
    sys.argv = request.argv
    _as_a_script(request.argv[0], request.main_package)
    _fresh_streams()
    return None


def _as_a_script(path: str, package: str) -> None:
    """``__main__`` as the caller's (the script, or ``python -m zuno``): click names the
    program from it."""
    import types

    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__package__ = package or None
    sys.modules["__main__"] = main


def _fresh_streams() -> None:
    """Standard streams built on descriptors 0-2 as Python builds them at startup."""
    import io

    def stream(fd: int, write: bool, like: io.TextIOWrapper) -> io.TextIOWrapper:
        raw = io.FileIO(fd, "wb" if write else "rb", closefd=False)
        unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))  # -u cannot reach a script
        buffer: io.BufferedIOBase = io.BufferedWriter(raw) if write else io.BufferedReader(raw)
        tty = raw.isatty()
        return io.TextIOWrapper(
            buffer,
            encoding=like.encoding,
            errors=like.errors,
            newline="\n",
            line_buffering=write and (tty or fd == 2),
            write_through=write and unbuffered,
        )

    assert isinstance(sys.__stdin__, io.TextIOWrapper)
    assert isinstance(sys.__stdout__, io.TextIOWrapper)
    assert isinstance(sys.__stderr__, io.TextIOWrapper)
    stdin = stream(0, False, sys.__stdin__)
    stdout = stream(1, True, sys.__stdout__)
    stderr = stream(2, True, sys.__stderr__)
    sys.stdin = sys.__stdin__ = stdin
    sys.stdout = sys.__stdout__ = stdout
    sys.stderr = sys.__stderr__ = stderr


def watch_caller(conn: socket.socket) -> None:
    """Kill this child the moment its caller's end of the socket closes (it died)."""
    import select
    import threading

    fd = conn.detach()

    def watch() -> None:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLRDHUP | select.POLLHUP)
        while True:
            for _fd, events in poller.poll():
                if events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR):
                    os.kill(os.getpid(), signal.SIGKILL)
                if events & select.POLLIN:
                    try:
                        data = os.read(fd, 4096)
                    except OSError:
                        data = b""
                    if not data:
                        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="zuno-caller-watch", daemon=True).start()


def run_command() -> None:
    """Run the command as the ``zuno`` script would, and end this process as Python would."""
    import atexit
    import traceback

    code = 0
    interrupted = False
    try:
        from zuno.cli.main import main

        main()
    except SystemExit as exit_:
        code = _exit_status(exit_.code)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError, ValueError):
            traceback.print_exc()
        interrupted = True
    except BaseException:  # what the interpreter would print before ending with 1
        with contextlib.suppress(OSError, ValueError):
            traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # pyright: ignore[reportPrivateUsage]
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = 120  # as Python: output that cannot be written at exit is status 120
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    os._exit(code)


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"{code}\n")
    return 1
