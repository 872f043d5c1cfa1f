"""Cold start: ``zuno --help`` and ``zuno tools`` answered from a cache of their output.

The first command after an install or an upgrade runs without a command server
(:mod:`zuno.cli.launcher`), and importing typer, pydantic and the runtime costs
most of a second on a slow machine. ``--help`` and the tool table depend only
on the installed code and the configuration, so the launcher keeps the exact
output of their last successful run (standard output only, exit status 0,
nothing on standard error) and prints it again, importing nothing but this
module, while nothing it depends on changed.

The key of an entry covers everything the output is made from: the command
line, the working folder, the interpreter, every file of the ``zuno`` package
(path, size, modification and change time, inode) and each installed
distribution's record, the user's config and trust files and the workspace's
``zuno.json`` (their bytes), the ``.zuno`` folder, the folders on ``PATH``
(a language server or ``rg`` installed), the environment variables that
steer Zuno or the terminal, and the terminal's size when output goes to one.
A configuration naming MCP servers is never cached (their tools are live).

Entries live in ``$ZUNO_CACHE_HOME`` (else ``$XDG_CACHE_HOME/zuno``, else
``~/.cache/zuno``), folder ``startup``, private (0700/0600), at most
:data:`_KEEP` of them. ``ZUNO_STARTUP_CACHE=off`` turns the cache off. Linux
only (where the config folder's place is known without importing platformdirs).
"""

from __future__ import annotations

import hashlib
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, TextIO

__all__ = ["STARTUP_CACHE_ENV", "Recording", "cache_key", "cached_output", "recording_for"]

STARTUP_CACHE_ENV = "ZUNO_STARTUP_CACHE"

_VERSION = b"zuno-startup-cache-1"
_KEEP = 64
_COMMANDS = frozenset(
    {("--help",), ("-h",), ("tools",), ("tools", "--json"), ("tools", "--help"), ("call", "--help")}
)
_ENV_PREFIXES = ("ZUNO_", "XDG_", "LC_", "PYTHON", "TERM", "COLOR")
_ENV_NAMES = (
    "HOME",
    "PATH",
    "LANG",
    "NO_COLOR",
    "FORCE_COLOR",
    "COLUMNS",
    "LINES",
    "TTY_COMPATIBLE",
)


def _enabled(argv: Sequence[str]) -> bool:
    value = os.environ.get(STARTUP_CACHE_ENV, "").strip().lower()
    if value in ("off", "0", "false", "no") or not sys.platform.startswith("linux"):
        return False
    rest = list(argv[1:])
    if tuple(rest) in _COMMANDS:
        return True
    if not rest or rest[0] != "tools":
        return False
    # tools with options that do not change where the configuration is read from
    # (--workspace does: its zuno.json is not in the key).
    i = 1
    while i < len(rest):
        if rest[i] == "--json":
            i += 1
        elif rest[i] in ("--db", "--agent") and i + 1 < len(rest):
            i += 2
        else:
            return False
    return True


def _folder() -> str:
    home = os.environ.get("ZUNO_CACHE_HOME")
    if home:
        return os.path.join(home, "startup")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "zuno", "startup")


def _config_folder() -> str:
    home = os.environ.get("ZUNO_CONFIG_HOME")
    if home:
        return home
    xdg = os.environ.get("XDG_CONFIG_HOME", "").strip()
    if not xdg or not os.path.isabs(xdg):
        xdg = os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(xdg, "zuno")


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        return f"<{type(exc).__name__}>".encode()


def _stat_line(path: str) -> bytes:
    try:
        st = os.stat(path)
    except OSError:
        return b"-"
    return f"{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}".encode()


def _tree(digest: Any, root: str) -> None:
    """Every file under ``root`` (``__pycache__`` aside): name and stat."""
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            digest.update(b"<unreadable>" + os.fsencode(folder))
            continue
        for entry in entries:
            if entry.name == "__pycache__":
                continue
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            line = f"{entry.path}\0{st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino}\n"
            digest.update(line.encode("utf-8", "surrogateescape"))


def cache_key(argv: Sequence[str], package: str | None = None) -> str:
    """The key of the output of ``argv`` here and now (see the module's text).

    Args:
        argv: The command line (``sys.argv``).
        package: The ``zuno`` package folder (default: this module's).
    """
    digest = hashlib.sha256(_VERSION)
    parts: list[bytes] = [
        "\0".join(argv[1:]).encode("utf-8", "surrogateescape"),
        os.fsencode(os.getcwd()),
        os.fsencode(sys.executable),
        sys.version.encode(),
    ]
    tty = os.isatty(1)
    parts.append(b"tty" if tty else b"pipe")
    if tty:
        try:
            size = os.get_terminal_size(1)
            parts.append(f"{size.columns}x{size.lines}".encode())
        except OSError:
            parts.append(b"no size")
    for name in sorted(os.environ):
        if name.startswith(_ENV_PREFIXES) or name in _ENV_NAMES:
            parts.append(f"{name}={os.environ[name]}".encode("utf-8", "surrogateescape"))
    config = _config_folder()
    for path in (os.path.join(config, "zuno.json"), os.path.join(config, "trust.json")):
        parts.append(_read(path))
    parts.append(_read("zuno.json"))
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        parts.append(os.fsencode(folder) + b" " + _stat_line(folder or "."))
    digest.update(b"\0\0".join(parts))
    root = package or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # zuno/
    _tree(digest, root)
    if os.path.isdir(".zuno"):
        _tree(digest, ".zuno")
    site = os.path.dirname(root)
    try:
        for entry in sorted(os.scandir(site), key=lambda e: e.name):
            if entry.name.endswith((".dist-info", ".pth", ".egg-link")):
                digest.update(os.fsencode(entry.name) + _stat_line(entry.path))
    except OSError:
        pass
    return digest.hexdigest()


def cached_output(argv: Sequence[str]) -> bytes | None:
    """The stored output of ``argv`` when nothing it depends on changed, else None."""
    if not _enabled(argv):
        return None
    try:
        with open(os.path.join(_folder(), cache_key(argv)), "rb") as f:
            return f.read()
    except OSError:
        return None


class _Tee:
    """A standard stream that also keeps what is written to it (text and bytes)."""

    def __init__(self, real: TextIO, record: list[bytes]) -> None:
        self._real = real
        self._record = record
        self._encoding = getattr(real, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        self._record.append(text.encode(self._encoding, "backslashreplace"))
        return self._real.write(text)

    def writelines(self, lines: Sequence[str]) -> None:
        for line in lines:
            self.write(line)

    @property
    def buffer(self) -> Any:
        return _BinaryTee(self._real.buffer, self._record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _BinaryTee:
    def __init__(self, real: Any, record: list[bytes]) -> None:
        self._real = real
        self._record = record

    def write(self, data: bytes) -> int:
        self._record.append(bytes(data))
        return self._real.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _Watcher:
    """A standard error that notes whether anything was written."""

    def __init__(self, real: TextIO) -> None:
        self._real = real
        self.used = False

    def write(self, text: str) -> int:
        self.used = self.used or bool(text)
        return self._real.write(text)

    @property
    def buffer(self) -> Any:
        self.used = True  # bytes written there are not seen: never cache
        return self._real.buffer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class Recording:
    """Keeps the output of one command run here, and stores it when it may be replayed."""

    def __init__(self, argv: Sequence[str], key: str) -> None:
        """Start recording standard output (and watching standard error)."""
        self._argv = list(argv)
        self._key = key
        self._record: list[bytes] = []
        self._out = sys.stdout
        self._err = sys.stderr
        self._watch = _Watcher(sys.stderr)
        sys.stdout = _Tee(sys.stdout, self._record)  # type: ignore[assignment]
        sys.stderr = self._watch  # type: ignore[assignment]

    def finish(self, status: object) -> None:
        """Put the streams back; store the output when the command succeeded quietly."""
        sys.stdout, sys.stderr = self._out, self._err
        if status not in (0, None) or self._watch.used or _names_mcp_servers():
            return
        _store(self._key, b"".join(self._record))


def recording_for(argv: Sequence[str]) -> Recording | None:
    """A :class:`Recording` when ``argv``'s output may be cached, else None."""
    if not _enabled(argv) or sys.stdout is None or sys.stderr is None:  # pyright: ignore[reportUnnecessaryComparison]
        return None
    if _reader_gone(1):
        return None  # the command fails to write and ends as it would without the cache
    return Recording(argv, cache_key(argv))


def _reader_gone(fd: int) -> bool:
    """Whether ``fd`` is a pipe or socket whose reader has gone (every write would fail)."""
    import select

    poller = select.poll()
    poller.register(fd, 0)
    try:
        events = poller.poll(0)
    except OSError:
        return False
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in events)


def _names_mcp_servers() -> bool:
    import json

    for path in (os.path.join(_config_folder(), "zuno.json"), "zuno.json"):
        try:
            with open(path, "rb") as f:
                data: object = json.loads(f.read())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("mcp"):  # pyright: ignore[reportUnknownMemberType]
            return True
    return False


def _store(key: str, output: bytes) -> None:
    folder = _folder()
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        temp = os.path.join(folder, f".{key}.{os.getpid()}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(output)
        os.replace(temp, os.path.join(folder, key))
        entries = sorted(os.scandir(folder), key=lambda e: e.stat().st_mtime_ns)
        for entry in entries[:-_KEEP]:
            os.unlink(entry.path)
    except OSError:
        pass  # a cache that cannot be written only costs the next start
