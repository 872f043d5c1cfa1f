"""The command server: Zuno imported once, forked once per short command.

Started in the background by :mod:`zuno.cli.launcher` (``python -P -m
zuno.cli.cmdserver FOLDER KEY``), it takes a lock so that only one server serves
a key, imports the command line, the runtime, every built-in tool, pydantic,
asyncio and rich, and then listens on ``FOLDER/server-KEY.sock``.

For each request it forks a child that becomes the caller's command: the
caller's descriptors 0-2 (and its terminal), working folder, environment,
umask and resource limits, and its argv, run through the same
:func:`zuno.cli.main.main` as without a server. The server reports how the
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

The pieces: :mod:`zuno.cli.server_imports` (what is imported once, the variables
read meanwhile, the fingerprint of the code), :mod:`zuno.cli.server_request` (a
request as received), :mod:`zuno.cli.server_child` (the child that becomes the
caller) and :mod:`zuno.cli.server_wire` (what the launcher and the server share).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import sys
import time

from zuno.cli.server_child import REFUSED_IN_CHILD, run_command, take_caller, watch_caller
from zuno.cli.server_imports import Fingerprint, RecordingEnviron, preload
from zuno.cli.server_request import Request, limits_problem, parse_request, receive_request
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

__all__ = ["serve"]

_LOG_LIMIT = 1 << 20


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
        self, place: ServerPlace, lock: int, listener: socket.socket, imported: RecordingEnviron
    ) -> None:
        self.place = place
        self.lock = lock
        self.listener = listener
        self.log = _Log(place.log)
        self.identity = b"\0".join(identity())
        self.process = process_identity()
        self.fingerprint = Fingerprint()
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
            payload, fds = receive_request(conn)
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

    def _refusal(self, request: Request, peer: int) -> str | None:
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
        return limits_problem(request.limits)

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

    def _fork(self, conn: socket.socket, request: Request) -> None:
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
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == REFUSED_IN_CHILD:
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

    def _become_child(self, conn: socket.socket, request: Request) -> None:
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
        problem = take_caller(request)
        if problem is not None:
            self.log.write(f"refused: {problem}")
            with contextlib.suppress(OSError):
                send_frame(conn, b"NO " + problem.encode())
            os._exit(REFUSED_IN_CHILD)
        # Ready: the caller may pass signals on from now.
        send_frame(conn, f"OK {os.getpid()}".encode())
        watch_caller(conn)
        run_command()


def _summary(argv: list[str]) -> str:
    text = " ".join(argv[1:3])
    return text[:80]


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
    recorder = RecordingEnviron(os.environ)
    os.environ = recorder  # noqa: B003  # pyright: ignore[reportAttributeAccessIssue]
    try:
        preload()
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
