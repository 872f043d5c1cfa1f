"""The command server's place, identity and wire format: what its callers share.

The launcher (:mod:`zuno.cli.launcher`) hands a command to the server through
these; the server (:mod:`zuno.cli.cmdserver`) answers through them; ``zuno server
status`` and ``zuno doctor`` ask it how it is (:func:`server_state`). They
import nothing of Zuno, and almost nothing else: ``os`` and ``sys`` at import
(``socket`` and ``json`` where a function needs them), since every command the
launcher serves pays for what is imported here.

The wire format (both directions, over a Unix stream socket) is a 4-byte
big-endian length followed by that many bytes; a request's descriptors ride on
its first bytes (SCM_RIGHTS). A request is a list of byte strings (see
:func:`pack`).
"""

from __future__ import annotations

import os
import sys

# No typing import at run time: it alone costs tens of milliseconds here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Sequence
    from typing import Any

__all__ = [
    "PROTOCOL",
    "SERVED_COMMANDS",
    "ServerPlace",
    "ask_server",
    "connect",
    "identity",
    "idle_seconds",
    "imported_names",
    "may_inspect",
    "note_imported_names",
    "pack",
    "private_folder",
    "process_identity",
    "receive_frame",
    "send_frame",
    "server_enabled",
    "server_key",
    "server_place",
    "server_state",
    "socket_address",
    "unpack",
    "world_key",
]

SERVED_COMMANDS = frozenset(
    {
        "tools",
        "call",
        "batch",
        "sessions",
        "show",
        "doctor",
        "diff",
        "undo",
        "config",
        "memory",
        "submit",
    }
)
"""First arguments the server runs. The rest (``run``, ``resume``, ``worker``,
``mcp``, ``trust``) are long-lived or interactive and start their own process:
their startup is small next to their run, and they keep a controlling terminal.
``server`` (status, stop) must not be run by, or start, the server it asks about."""

PROTOCOL = b"zuno-cmdserver-1"

# What decides which server a caller may use: the same interpreter, package and
# locale (the child's standard streams are built with the server's encoding).
_KEY_VARIABLES = ("LANG", "LC_ALL", "LC_CTYPE")
_SOCKET_PATH_MAX = 108  # sun_path, with its terminating NUL
_NAMESPACES = ("pid", "mnt", "net", "user", "ipc", "uts")
_STATUS_FIELDS = frozenset(
    {
        b"Uid",
        b"Gid",
        b"Groups",
        b"CapInh",
        b"CapPrm",
        b"CapEff",
        b"CapBnd",
        b"CapAmb",
        b"NoNewPrivs",
        b"Seccomp",
        b"Seccomp_filters",
    }
)
_FLAGS = (
    "optimize",
    "dont_write_bytecode",
    "no_user_site",
    "no_site",
    "ignore_environment",
    "isolated",
    "bytes_warning",
    "dev_mode",
    "utf8_mode",
    "warn_default_encoding",
    "int_max_str_digits",
)


def server_enabled() -> bool:
    """Whether ``ZUNO_SERVER`` allows the command server (it does unless off)."""
    value = os.environ.get("ZUNO_SERVER", "")
    return value.strip().lower() not in {"off", "0", "no", "false"}


class ServerPlace:
    """Where this caller's server lives: the run folder and the files named by its key."""

    def __init__(self, folder: str, key: str) -> None:
        self.folder = folder
        self.key = key
        base = os.path.join(folder, "server-" + key)
        self.socket = base + ".sock"
        self.lock = base + ".lock"
        self.log = base + ".log"
        # The names of the variables read at import, for the identity alone (see world_key).
        self.names = base + ".env"


_IDENTITY: list[bytes] = []


def identity() -> list[bytes]:
    """What must be equal between a caller and its server (and so names the server).

    The module search path counts without the script's own folder, which the
    console script has first and the server (started with ``-P``) does not.
    The server checks the process part itself (:func:`process_identity` of the
    peer): a caller's word is not taken for its namespaces or confinement.
    """
    if _IDENTITY:  # read once a process: the key and the request both need it
        return list(_IDENTITY)
    search_path = sys.path if sys.flags.safe_path else sys.path[1:]
    parts = [
        PROTOCOL,
        os.fsencode(sys.executable),
        os.fsencode(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),  # zuno/
        repr([getattr(sys.flags, name) for name in _FLAGS]).encode(),
        repr(search_path).encode(),
    ]
    for name in sorted(os.environ):
        if name.startswith("PYTHON") or name in _KEY_VARIABLES:
            parts.append(os.fsencode(name + "=" + os.environ[name]))
    _IDENTITY[:] = parts + process_identity()
    return list(_IDENTITY)


def process_identity(pid: int | None = None) -> list[bytes]:
    """What the kernel says of a process (this one by default) that a served command keeps.

    Its namespaces and cgroup, its OOM score and LSM label, its credentials,
    capabilities and seccomp state, its CPU affinity and nice value.
    """
    proc = "/proc/self" if pid is None else f"/proc/{pid}"
    parts: list[bytes] = []
    for name in _NAMESPACES:
        try:
            parts.append(os.fsencode(os.readlink(f"{proc}/ns/{name}")))
        except OSError:
            parts.append(b"-")
    for name in ("cgroup", "oom_score_adj", "attr/current"):
        parts.append(_read(f"{proc}/{name}"))
    # Who the process is and what confines it: credentials, capabilities, seccomp.
    for line in _read(f"{proc}/status").splitlines():
        if line.split(b":", 1)[0] in _STATUS_FIELDS:
            parts.append(line)
    target = 0 if pid is None else pid
    try:
        scheduling = (sorted(os.sched_getaffinity(target)), os.getpriority(os.PRIO_PROCESS, target))
    except OSError:
        scheduling = None
    parts.append(repr(scheduling).encode())
    return parts


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return b"-"


def server_place() -> ServerPlace:
    """The run folder (``$XDG_RUNTIME_DIR/zuno`` or ``/tmp/zuno-UID``) and this caller's key."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    folder = os.path.join(runtime, "zuno") if runtime else f"/tmp/zuno-{os.getuid()}"
    return ServerPlace(folder, world_key(folder, os.environ))


def world_key(folder: str, environ: Any) -> str:
    """The key of the server for this identity and these values of the variables read at import.

    A server notes, in ``server-BASE.env`` beside its socket, the names of the
    variables that its imports read (``BASE`` names the identity alone). A caller
    puts their values in its key: a caller with another ``HOME`` (or any such
    variable) asks for, and starts, a server of its own instead of one that
    would refuse it. (A server whose imports read the whole environment is not
    keyed on it, which changes with every shell; it refuses a caller whose
    environment differs.)
    """
    joined = b"\0".join(identity())
    parts = [joined]
    for name in imported_names(ServerPlace(folder, server_key(joined)).names):
        value = environ.get(name)
        parts.append(b"-" if value is None else os.fsencode(name + "=" + value))
    return server_key(b"\0".join(parts))


def imported_names(path: str) -> list[str]:
    """The sorted names in a ``server-BASE.env`` file (none when there is no such file)."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as file:
            return sorted({line for line in file.read().splitlines() if line})
    except OSError:
        return []


def note_imported_names(path: str, names: set[str]) -> None:
    """Add ``names`` to a ``server-BASE.env`` file, atomically (a caller may read it meanwhile)."""
    lines = sorted(names | set(imported_names(path)))
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with open(fd, "w", encoding="utf-8", errors="surrogateescape") as file:
        file.write("".join(line + "\n" for line in lines))
    os.replace(temporary, path)


def socket_address(path: str) -> tuple[str, int | None]:
    """An address for ``path`` that fits a socket's name (108 bytes), and a descriptor to close.

    A deep run folder is reached through ``/proc/self/fd`` and a descriptor of it.
    """
    if len(os.fsencode(path)) < _SOCKET_PATH_MAX:
        return path, None
    folder, name = os.path.split(path)
    fd = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    return f"/proc/self/fd/{fd}/{name}", fd


def connect(sock: socket.socket, path: str) -> None:
    """``sock.connect(path)``, however deep the path."""
    address, fd = socket_address(path)
    try:
        sock.connect(address)
    finally:
        if fd is not None:
            os.close(fd)


def server_key(joined_identity: bytes) -> str:
    """The short name of the server for this identity (collisions are refused by the server)."""
    import zlib

    return f"{zlib.crc32(joined_identity):08x}{zlib.adler32(joined_identity):08x}"


def private_folder(folder: str, *, create: bool) -> str | None:
    """None when ``folder`` is a real folder of ours that nobody else can enter; else why not."""
    import stat

    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        if not create:
            return "it does not exist"
        try:
            os.mkdir(folder, 0o700)  # in /tmp or XDG_RUNTIME_DIR; neither is made here
        except FileExistsError:
            pass  # made at the same moment by another zuno: checked below
        except OSError as error:
            return f"cannot create it ({error.strerror})"
        info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder (a symbolic link or a file)"
    if info.st_uid != os.getuid():
        return f"it belongs to uid {info.st_uid}"
    if info.st_mode & 0o077:
        return f"others may enter it (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def pack(items: Sequence[bytes]) -> bytes:
    """``items`` as one length-prefixed record (see :func:`unpack`)."""
    body = b"".join(len(item).to_bytes(4, "big") + item for item in items)
    return len(items).to_bytes(4, "big") + body


def unpack(data: bytes) -> list[bytes]:
    """The byte strings of a :func:`pack` record. Raises ValueError on a malformed one."""
    if len(data) < 4:
        raise ValueError("a truncated record")
    count, at = int.from_bytes(data[:4], "big"), 4
    items: list[bytes] = []
    for _ in range(count):
        if at + 4 > len(data):
            raise ValueError("a truncated record")
        size = int.from_bytes(data[at : at + 4], "big")
        at += 4
        if at + size > len(data):
            raise ValueError("a truncated record")
        items.append(data[at : at + size])
        at += size
    if at != len(data):
        raise ValueError("trailing bytes after a record")
    return items


def send_frame(sock: socket.socket, payload: bytes, fds: Sequence[int] = ()) -> None:
    """One frame: the length, then the payload; descriptors ride on its first bytes."""
    import socket as socket_module

    data = len(payload).to_bytes(4, "big") + payload
    if fds:
        import array

        ancillary = [
            (
                socket_module.SOL_SOCKET,
                socket_module.SCM_RIGHTS,
                array.array("i", fds).tobytes(),
            )
        ]
        sent = sock.sendmsg([data], ancillary)
        data = data[sent:]
    if data:
        sock.sendall(data)


def receive_frame(sock: socket.socket, limit: int = 1 << 24) -> bytes | None:
    """The payload of the next frame, or None at the end of the stream."""
    header = _receive_exactly(sock, 4)
    if header is None:
        return None
    size = int.from_bytes(header, "big")
    if size > limit:
        raise ValueError(f"a frame of {size} bytes (at most {limit})")
    return _receive_exactly(sock, size)


def _receive_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks: list[bytes] = []
    left = size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


DEFAULT_IDLE = 600.0


def idle_seconds() -> float:
    """``ZUNO_SERVER_IDLE``: how long a server waits for a command before it ends."""
    try:
        return max(0.1, float(os.environ.get("ZUNO_SERVER_IDLE", DEFAULT_IDLE)))
    except ValueError:
        return DEFAULT_IDLE


def ask_server(kind: bytes) -> bytes | None:
    """Send a control request (``status`` or ``stop``) to this caller's server: its answer."""
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10.0)
    try:
        connect(sock, server_place().socket)
        send_frame(sock, pack([PROTOCOL, kind]))
        return receive_frame(sock)
    except (OSError, ValueError):
        return None
    finally:
        sock.close()


def server_state() -> dict[str, Any]:
    """What ``zuno server status --json`` and ``zuno doctor`` report of this caller's server."""
    import json

    place = server_place()
    state: dict[str, Any] = {
        "enabled": server_enabled(),
        "running": False,
        "pid": None,
        "socket": place.socket,
        "folder": place.folder,
        # A missing folder is made by the first command that uses a server.
        "problem": private_folder(place.folder, create=False)
        if os.path.lexists(place.folder)
        else None,
        "served": 0,
        "started": None,
        "idle_exit": idle_seconds(),
    }
    answer = ask_server(b"status") if state["problem"] is None else None
    try:
        told = json.loads(answer) if answer is not None else None
    except ValueError:
        told = None
    if isinstance(told, dict):
        state["running"] = True
        for name in ("pid", "served", "started", "idle_exit"):
            state[name] = told.get(name)  # pyright: ignore[reportUnknownMemberType]
    return state


def may_inspect(pid: int) -> bool:
    """Whether the kernel lets this process read ``pid``'s environment (a ptrace read check).

    It does only when this process is not more confined than ``pid``: the same
    user, at least its capabilities, and a Landlock domain (or LSM label) that
    contains it. A confined caller is never served by a less confined server,
    and a server never runs a command with less confinement than its caller's.
    """
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return True
