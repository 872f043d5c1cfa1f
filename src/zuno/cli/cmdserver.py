"""The command server: Zuno imported once, forked once per short command.

Started in the background by :mod:`zuno.cli.launcher` (``python -P -m
zuno.cli.cmdserver FOLDER KEY``), it takes a lock so that only one server serves
a key, imports the command line, the runtime, every built-in tool, pydantic,
asyncio and rich, and then listens on ``FOLDER/server-KEY.sock``.

For each request it forks a child that becomes the caller's command: the
caller's descriptors 0-2 (and its terminal), working folder, environment,
umask and resource limits, and its argv, run through the same
:func:`zuno.cli.app.main` as without a server. The server reports how the
child ended; the caller exits the same way.

What keeps a served command the same as one run in its own process:

* Only the same user is served (``SO_PEERCRED``), through a socket in a folder
  only that user can enter (:func:`zuno.cli.server_wire.private_folder`).
* A request is refused (the caller runs the command itself) when the caller's
  interpreter, package, search path, locale, namespaces or cgroup differ, when
  an environment variable read while the server imported its modules has
  another value now, or when the caller's limits exceed the server's.
* The variables read while importing are noted beside the socket and their
  values are part of its key: a caller with another ``HOME`` asks for, and
  starts, a server of its own (see :func:`zuno.cli.server_wire.world_key`).
* Code that changed on disk since the server started (any ``.py`` of the
  package or a module it imported, told by inode, size and change time; a
  folder on the search path, where packages are installed) makes the server
  refuse, remove its socket and end: the caller starts a fresh one.
* When the caller disappears (even SIGKILL), its child is killed at once.
* The server ends after ``ZUNO_SERVER_IDLE`` seconds (default 600) without a
  served command (a refused one does not count), or when its socket is
  removed or replaced.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path

from zuno.cli.server_wire import (
    PROTOCOL,
    ServerPlace,
    identity,
    idle_seconds,
    may_inspect,
    note_imported_names,
    private_folder,
    process_identity,
    send_frame,
    server_key,
    socket_address,
    unpack,
    world_key,
)

__all__ = ["parse_request", "serve"]

_REFUSED_IN_CHILD = 199  # not an exit status of zuno's: the child could not become the caller
_MAX_REQUEST = 1 << 22  # a request: argv and environment, far below this
_LOG_LIMIT = 1 << 20


class _RecordingEnviron(MutableMapping[str, str]):
    """``os.environ`` while the server imports: notes which variables were read.

    A module that reads a variable when it is imported keeps what it read; a
    caller whose value differs cannot be served by this server.
    """

    def __init__(self, real: MutableMapping[str, str]) -> None:
        self.real = real
        self.read: set[str] = set()
        self.everything = False
        self.recording = True

    def _note(self, key: object) -> None:
        if self.recording and isinstance(key, str):
            self.read.add(key)

    def __getitem__(self, key: str) -> str:
        self._note(key)
        return self.real[key]

    def __setitem__(self, key: str, value: str) -> None:
        self.real[key] = value

    def __delitem__(self, key: str) -> None:
        del self.real[key]

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return key in self.real

    def __iter__(self) -> Iterator[str]:
        if self.recording:
            self.everything = True
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)

    def copy(self) -> dict[str, str]:
        if self.recording:
            self.everything = True
        return dict(self.real)


_PRELOAD = (
    "anyio",
    "anyio._backends._asyncio",
    "anyio._core._signals",
    "encodings.ascii",
    "typer.main",
    "typer._adapters",
    "typer._click.decorators",
    "typer._click._textwrap",
    "rich.console",
    "rich.markup",
    "rich.table",
    "rich.text",
    "rich.syntax",
    "rich._emoji_codes",
    "rich.markdown",
    "rich.panel",
    "typer.rich_utils",
    "zuno.cli",
    "zuno.cli.render",
    "zuno.cli.live",
    "zuno.cli.transcript",
    "zuno.config.loading",
    "zuno.dispatch.dispatcher",
    "zuno.session.runtime",
    "zuno.durability.store.sqlite",
    "zuno.cli.doctor",
    "zuno.workspace.checkpoints.store",
    "zuno.tools.file_versions",
)
"""What short commands import, imported once by the server (a missing one is skipped)."""


def _preload() -> None:
    """Import (and warm) what short commands use, before any request."""
    import importlib

    from pydantic.plugin._loader import get_plugins  # pyright: ignore[reportPrivateImportUsage]

    from zuno.tools import BUILTINS

    modules = [*_PRELOAD, *(entry.home.partition(":")[0] for entry in BUILTINS)]
    for module in modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    get_plugins()  # pydantic's scan of installed plugins, done once
    _complete_models()
    from zuno.cli.app import prebuild

    prebuild()  # typer's per-option adapters, built once


def _complete_models() -> None:
    """Finish every pydantic model whose schema is built on first use (config, tool arguments)."""
    from pydantic import BaseModel

    pending: list[type[BaseModel]] = [BaseModel]
    seen: set[type[BaseModel]] = set()
    while pending:
        model = pending.pop()
        for sub in model.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                pending.append(sub)
    for model in seen:
        if not model.__pydantic_complete__:
            # A model that cannot be finished yet is finished on first use, as without a server.
            with contextlib.suppress(Exception):
                model.model_rebuild()


class _Fingerprint:
    """The code on disk when the server started, told by content rather than by mtime.

    Each ``.py`` of the package and each file of a module the server imported
    (its dependencies) is known by its inode, size and inode change time: an
    edit changes the change time even when it keeps the mtime and the size
    (``touch -r``, ``os.utime``), and a file replaced by a rename has another
    inode. The folders on the search path are known by mtime and inode (a
    package installed or removed).
    """

    def __init__(self) -> None:
        self.package = Path(__file__).resolve().parents[1]  # the zuno package
        self.modules = sorted(
            {
                path
                for module in list(sys.modules.values())
                if isinstance(path := getattr(module, "__file__", None), str)
                and not path.startswith(str(self.package))
            }
        )
        self.taken = self._take()

    def _take(self) -> dict[str, tuple[int, int, int]]:
        seen: dict[str, tuple[int, int, int]] = {}
        for entry in sys.path:
            try:
                info = os.stat(entry or ".")
            except OSError:
                continue
            seen[entry] = (info.st_mtime_ns, info.st_ino, 0)
        for folder, dirs, files in os.walk(self.package):
            # Compiled bytecode is written by any process that imports: not a change.
            dirs[:] = [name for name in dirs if name != "__pycache__"]
            info = os.stat(folder)
            seen[folder] = (info.st_mtime_ns, info.st_ino, 0)
            for name in files:
                if name.endswith(".py"):
                    _note_file(seen, os.path.join(folder, name))
        for path in self.modules:
            _note_file(seen, path)
        return seen

    def changed(self) -> bool:
        return self._take() != self.taken


def _note_file(seen: dict[str, tuple[int, int, int]], path: str) -> None:
    try:
        info = os.stat(path)
    except OSError:
        seen[path] = (-1, -1, -1)
        return
    seen[path] = (info.st_ctime_ns, info.st_size, info.st_ino)


class _Log:
    def __init__(self, path: str) -> None:
        try:
            if os.path.getsize(path) > _LOG_LIMIT:
                os.unlink(path)
        except OSError:
            pass
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def write(self, line: str) -> None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with contextlib.suppress(OSError):
            os.write(self.fd, f"{stamp} {line}\n".encode("utf-8", "backslashreplace"))


class _Server:
    def __init__(
        self, place: ServerPlace, lock: int, listener: socket.socket, imported: _RecordingEnviron
    ) -> None:
        self.place = place
        self.lock = lock
        self.listener = listener
        self.log = _Log(place.log)
        self.identity = b"\0".join(identity())
        self.process = process_identity()
        self.fingerprint = _Fingerprint()
        self.environ = dict(os.environ)
        self.env_read = set(imported.read)
        self.env_read_all = imported.everything
        self.idle = idle_seconds()
        self.started = time.time()
        self.last = time.monotonic()
        self.served = 0
        self.stopping = False
        self.socket_inode = os.stat(place.socket).st_ino
        # Running children: pidfd -> (pid, caller's connection, argv summary).
        self.children: dict[int, tuple[int, socket.socket, str]] = {}

    # -- the loop ---------------------------------------------------------------

    def run(self) -> None:
        import selectors

        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.log.write(
            f"start pid={os.getpid()} key={self.place.key} idle={self.idle:g} "
            f"variables read at import: {','.join(sorted(self.env_read)) or '-'}"
        )
        reason = "stopped"
        while True:
            if self.stopping and not self.children:
                break
            timeout = max(0.0, self.last + self.idle - time.monotonic())
            if not self.children and timeout == 0.0:
                reason = "idle"
                break
            for key, _ in self.selector.select(min(timeout, 5.0) if not self.children else 5.0):
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._reap(key.fd)
            if not self.stopping and not self._socket_is_ours():
                reason = "socket removed"
                self._stop_listening()
        self.log.write(f"exit pid={os.getpid()} served={self.served} ({reason})")
        self._stop_listening()

    def _stop_listening(self) -> None:
        if not self.stopping:
            self.stopping = True
            if self._socket_is_ours():
                with contextlib.suppress(OSError):
                    os.unlink(self.place.socket)
            self.selector.unregister(self.listener)
            self.listener.close()
            os.close(self.lock)  # a fresh server may start now, beside the commands still running

    def _socket_is_ours(self) -> bool:
        """Whether the socket's path still names the socket this server listens on."""
        try:
            return os.stat(self.place.socket).st_ino == self.socket_inode
        except OSError:
            return False

    # -- one request ----------------------------------------------------------------

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        # Only a command served counts as activity (in _fork and _reap): a server that
        # refuses every caller must still end when idle.
        fds: list[int] = []
        try:
            peer = self._peer(conn)
            if peer is None:
                conn.close()
                return
            conn.settimeout(5.0)
            payload, fds = _receive_request(conn)
            conn.settimeout(None)
            self._handle(conn, peer, payload, fds)
        except (OSError, ValueError) as error:
            self.log.write(f"refused: a bad request ({error})")
            conn.close()
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _peer(self, conn: socket.socket) -> int | None:
        """The caller's pid, when it is this user and exactly as confined as the server."""
        import struct

        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():
            self.log.write(f"refused: uid {uid} is not the server's")
            return None
        if not may_inspect(pid):
            # The caller is less confined than the server (another Landlock domain,
            # more capabilities): its command must not run with the server's limits.
            self.log.write(f"refused: pid {pid} is not confined as the server is")
            return None
        return pid

    def _handle(self, conn: socket.socket, peer: int, payload: bytes, fds: list[int]) -> None:
        fields = unpack(payload)
        if len(fields) < 2 or fields[0] != PROTOCOL:
            raise ValueError("not a zuno command server request")
        kind = fields[1]
        if kind == b"status":
            self._answer_status(conn)
            return
        if kind == b"stop":
            send_frame(conn, b"OK stopping")
            conn.close()
            self.log.write("stop requested")
            self._stop_listening()
            return
        request = parse_request(fields, fds)
        problem = self._refusal(request, peer)
        if problem is not None:
            self.log.write(f"refused: {problem}")
            send_frame(conn, b"NO " + problem.encode())
            conn.close()
            return
        self._fork(conn, request)

    def _refusal(self, request: _Request, peer: int) -> str | None:
        import threading

        if threading.active_count() > 1:
            return "the server runs a thread: forking it would not be safe"
        if request.identity != self.identity:
            return "another interpreter, search path, locale, namespace or cgroup"
        # The caller's word above; the kernel's here (a request can be forged).
        if process_identity(peer) != self.process:
            return "the caller's namespaces, cgroup or confinement differ from the server's"
        if self.fingerprint.changed():
            self._stop_listening()  # the caller starts a fresh server
            return "stale: code changed on disk since the server started"
        if len(request.fds) not in (3, 4):
            return "the standard descriptors were not passed"
        environ = request.environ
        if self.env_read_all and environ != self.environ:
            return "the environment differs (read whole at import)"
        for key in self.env_read:
            if environ.get(key) != self.environ.get(key):
                return f"{key} differs from when the server started"
        return _limits_problem(request.limits)

    def _answer_status(self, conn: socket.socket) -> None:
        import json

        status = {
            "pid": os.getpid(),
            "served": self.served,
            "started": self.started,
            "idle_exit": self.idle,
            "running": len(self.children),
        }
        send_frame(conn, json.dumps(status).encode())
        conn.close()

    def _fork(self, conn: socket.socket, request: _Request) -> None:
        pid = os.fork()
        if pid == 0:
            try:
                self._become_child(conn, request)
            except BaseException:
                import traceback

                failure = traceback.format_exc()
                self.log.write("child failed: " + failure)
                os.write(2, f"zuno: the command server's child failed:\n{failure}".encode())
            finally:
                os._exit(70)  # never back into the server's loop
        pidfd = os.pidfd_open(pid)
        import selectors

        self.selector.register(pidfd, selectors.EVENT_READ)
        self.children[pidfd] = (pid, conn, _summary(request.argv))
        self.last = time.monotonic()

    def _reap(self, pidfd: int) -> None:
        pid, conn, summary = self.children.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _REFUSED_IN_CHILD:
            conn.close()  # the child said why; the caller runs the command itself
            return
        self.served += 1
        if os.WIFSIGNALED(status):
            answer, shown = f"SG {os.WTERMSIG(status)}", f"signal={os.WTERMSIG(status)}"
        else:
            code = os.waitstatus_to_exitcode(status)
            answer, shown = f"EX {code}", f"exit={code}"
        self.log.write(f"served pid={pid} {shown} argv={summary}")
        with contextlib.suppress(OSError):
            send_frame(conn, answer.encode())
        conn.close()
        self.last = time.monotonic()

    # -- in the child -----------------------------------------------------------------

    def _become_child(self, conn: socket.socket, request: _Request) -> None:
        # Nothing of the server's: its listener, its other callers, its children.
        self.selector.close()
        self.listener.close()
        if not self.stopping:
            os.close(self.lock)
        for pidfd, (_pid, other, _summary) in self.children.items():
            os.close(pidfd)
            other.close()
        for signum in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for signum in request.ignored:  # as the caller had them (nohup, a background job)
            with contextlib.suppress(OSError, ValueError):
                signal.signal(signum, signal.SIG_IGN)
        problem = _take_caller(request)
        if problem is not None:
            self.log.write(f"refused: {problem}")
            with contextlib.suppress(OSError):
                send_frame(conn, b"NO " + problem.encode())
            os._exit(_REFUSED_IN_CHILD)
        # Ready: the caller may pass signals on from now.
        send_frame(conn, f"OK {os.getpid()}".encode())
        _watch_caller(conn)
        _run_command()


class _Request:
    """A parsed ``run`` request."""

    def __init__(self, fields: list[bytes], fds: list[int]) -> None:
        self.identity = fields[2]
        self.cwd = fields[3]
        self.umask = int(fields[4])
        self.tty = fields[5] == b"tty"
        self.argv = [os.fsdecode(arg) for arg in unpack(fields[6])]
        self.environb: dict[bytes, bytes] = {}
        for item in unpack(fields[7]):
            key, sep, value = item.partition(b"=")
            if sep:
                self.environb[key] = value
        self.environ = {os.fsdecode(k): os.fsdecode(v) for k, v in self.environb.items()}
        self.limits: dict[str, tuple[int, int]] = {}
        for item in unpack(fields[8]):
            name, _, values = item.decode().partition("=")
            soft, _, hard = values.partition(":")
            self.limits[name] = (int(soft), int(hard))
        self.ignored = [int(signum) for signum in unpack(fields[9])]
        self.main_package = os.fsdecode(fields[10])
        self.fds = fds
        if not self.argv:
            raise ValueError("an empty argv")


def parse_request(fields: list[bytes], fds: list[int]) -> _Request:
    """A ``run`` request from its fields. Raises ValueError on anything malformed."""
    if len(fields) != 11 or fields[0] != PROTOCOL or fields[1] != b"run":
        raise ValueError("not a zuno command server run request")
    return _Request(fields, fds)


def _receive_request(conn: socket.socket) -> tuple[bytes, list[int]]:
    import array

    fds = array.array("i")
    data, ancillary, _flags, _addr = conn.recvmsg(
        65536, socket.CMSG_SPACE(8 * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    received: list[int] = []
    for level, kind, blob in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(blob[: len(blob) - (len(blob) % fds.itemsize)])
            received.extend(fds)
    try:
        if len(data) < 4:
            data += _exactly(conn, 4 - len(data))
        size = int.from_bytes(data[:4], "big")
        if size > _MAX_REQUEST:
            raise ValueError(f"a request of {size} bytes")
        body = data[4:]
        if len(body) < size:
            body += _exactly(conn, size - len(body))
        if len(body) != size:
            raise ValueError("trailing bytes after a request")
    except BaseException:
        for fd in received:
            os.close(fd)
        raise
    return body, received


def _exactly(conn: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = conn.recv(size)
        if not chunk:
            raise ValueError("the caller hung up mid-request")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _limits_problem(limits: dict[str, tuple[int, int]]) -> str | None:
    import resource

    for name, (_soft, hard) in limits.items():
        resource_id = getattr(resource, name, None)
        if resource_id is None:
            continue
        _own_soft, own_hard = resource.getrlimit(resource_id)
        if own_hard != resource.RLIM_INFINITY and (
            hard == resource.RLIM_INFINITY or hard > own_hard
        ):
            return f"the caller's {name} ({hard}) is above the server's ({own_hard})"
    return None


def _summary(argv: list[str]) -> str:
    text = " ".join(argv[1:3])
    return text[:80]


def _take_caller(request: _Request) -> str | None:
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


def _watch_caller(conn: socket.socket) -> None:
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


def _run_command() -> None:
    """Run the command as the ``zuno`` script would, and end this process as Python would."""
    import atexit
    import traceback

    code = 0
    interrupted = False
    try:
        from zuno.cli.app import main

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


def serve(folder: str, key: str) -> int:
    """Serve commands for ``key`` from ``folder`` until idle or stopped; the exit status."""
    os.chdir("/")
    place = ServerPlace(folder, key)
    if private_folder(folder, create=False) is not None:
        return 1
    lock = os.open(place.lock, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another server has this key
    if world_key(folder, os.environ) != key:
        return 1  # not the server its caller asked for: it would refuse every request
    recorder = _RecordingEnviron(os.environ)
    os.environ = recorder  # noqa: B003  # pyright: ignore[reportAttributeAccessIssue]
    try:
        _preload()
    finally:
        recorder.recording = False
        os.environ = recorder.real  # noqa: B003  # pyright: ignore[reportAttributeAccessIssue]
    # The variables just read name this server's world: note them, then serve under
    # the key that includes them (callers with other values start their own server).
    base = ServerPlace(folder, server_key(b"\0".join(identity())))
    note_imported_names(base.names, recorder.read)
    own = world_key(folder, os.environ)
    if own != key:
        place = ServerPlace(folder, own)
        own_lock = os.open(place.lock, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(own_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # a server for this world runs already
        finally:
            os.close(lock)
        lock = own_lock
    import gc

    gc.collect()
    gc.freeze()  # what was imported is never collected: children do not copy it to scan it
    with contextlib.suppress(FileNotFoundError):
        os.unlink(place.socket)  # a dead server's; we hold the lock
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    address, folder_fd = socket_address(place.socket)
    try:
        listener.bind(address)
    finally:
        os.umask(old_umask)
        if folder_fd is not None:
            os.close(folder_fd)
    listener.listen(64)
    server = _Server(place, lock, listener, recorder)
    signal.signal(signal.SIGTERM, lambda _s, _f: server._stop_listening())  # pyright: ignore[reportPrivateUsage]
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], sys.argv[2]))
