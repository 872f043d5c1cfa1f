"""The real ``zuno`` console script against a command server of a test's own.

Each :class:`World` has its own run folder (``XDG_RUNTIME_DIR``), home, config and
data folders, so its servers never meet another test's or the user's. What was
served is read from the servers' logs (``served pid=N exit=S argv=...``), never
guessed from timing. Used by tests/cli/test_command_server.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "ZUNO",
    "Served",
    "World",
    "alive",
    "normalise",
    "processes_with",
    "wait_for",
]

T = TypeVar("T")


def _zuno_script() -> str:
    beside = Path(sys.executable).with_name("zuno")
    if beside.exists():
        return str(beside)
    return str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "zuno")


ZUNO = _zuno_script()
"""The installed console script (the launcher), as a user runs it."""

_SERVED = re.compile(r" served pid=(\d+) (exit|signal)=(-?\d+) argv=(.*)$")
_IDS = re.compile(rb"\b(call|ses)_[0-9a-f]{12,}\b")


def normalise(data: bytes) -> bytes:
    """Output with the ids that differ between two runs (calls, sessions) made equal."""
    return _IDS.sub(lambda m: m.group(1) + b"_ID", data)


def wait_for(check: Callable[[], T], what: str, timeout: float = 60.0, every: float = 0.1) -> T:
    """The first true value of ``check()`` within ``timeout`` seconds, else an AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting ({timeout:g} s) for {what}")
        time.sleep(every)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def processes_with(marker: bytes) -> list[int]:
    """Live processes whose command line contains ``marker`` (NULs between arguments)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline and alive(int(entry)):
            found.append(int(entry))
    return found


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid``, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


@dataclass(frozen=True)
class Served:
    """One ``served`` line of a server log."""

    log: str
    pid: int
    how: str  # "exit" or "signal"
    status: int
    argv: str


class World:
    """A private run folder, home and workspace; ``zuno`` runs with ``ZUNO_SERVER=on``."""

    def __init__(
        self,
        root: Path,
        *,
        idle: float = 120.0,
        extra: Mapping[str, str] | None = None,
        run_dir: Path | None = None,
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        # A socket's path holds at most 107 bytes: the run folder is short unless asked.
        self.own_run_dir = run_dir is None
        self.run_dir = run_dir or Path(tempfile.mkdtemp(prefix="zs-", dir="/tmp"))
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.run_dir, 0o700)
        self.folder = self.run_dir / "zuno"
        self.home = root / "home"
        self.config = root / "config"
        self.data = root / "data"
        self.ws = root / "ws"
        for path in (self.home, self.config, self.data, self.ws):
            path.mkdir()
        (self.ws / "a.txt").write_text("alpha\nbeta\n")
        self.db = root / "store.db"
        self.env: dict[str, str] = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "TERM": "xterm-256color",
            "XDG_RUNTIME_DIR": str(self.run_dir),
            "XDG_CONFIG_HOME": str(self.config),
            "XDG_DATA_HOME": str(self.data),
            "ZUNO_CONFIG_HOME": str(self.config / "zuno"),
            "ZUNO_DB": str(self.db),
            "ZUNO_SERVER": "on",
            "ZUNO_SERVER_IDLE": f"{idle:g}",
        }
        for name in ("LANG", "LC_ALL", "LC_CTYPE"):
            if name in os.environ:
                self.env[name] = os.environ[name]
        if extra:
            self.env.update(extra)
        self.pids: set[int] = set()

    # -- running zuno --------------------------------------------------------------

    def zuno(
        self,
        *args: str,
        served: bool = True,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        input: bytes | None = None,
        umask: int = -1,
        preexec_fn: Callable[[], None] | None = None,
        prefix: tuple[str, ...] = (),
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[bytes]:
        """``zuno ARGS`` (``ZUNO_SERVER=off`` unless ``served``), stdin not a terminal."""
        full = {**self.env, **(env or {})}
        if not served:
            full["ZUNO_SERVER"] = "off"
        return subprocess.run(
            [*prefix, ZUNO, *args],
            cwd=cwd or self.ws,
            env=full,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
            capture_output=True,
            umask=umask,
            preexec_fn=preexec_fn,
            timeout=timeout,
        )

    def cold(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        """``zuno ARGS`` in its own process (``ZUNO_SERVER=off``)."""
        return self.zuno(*args, served=False, **kwargs)

    # -- the server ----------------------------------------------------------------------

    def status(self, env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """``zuno server status --json``."""
        proc = self.zuno("server", "status", "--json", env=env)
        assert proc.returncode == 0, proc.stderr.decode()
        state = json.loads(proc.stdout)
        if state.get("pid"):
            self.pids.add(int(state["pid"]))
        return state

    def wait_up(
        self, env: Mapping[str, str] | None = None, timeout: float = 90.0
    ) -> dict[str, Any]:
        """Start a server if none runs and wait (bounded) until it answers."""
        state = self.status(env)
        if state["running"]:
            return state
        self.zuno("tools", env=env)  # with none running, this starts one in the background
        try:
            return wait_for(
                lambda: (s := self.status(env))["running"] and s,
                "the command server to start",
                timeout,
                0.3,
            )
        except AssertionError as error:
            last = self.zuno("server", "status", "--json", env=env)
            raise AssertionError(
                f"{error}; last status {last.stdout!r} {last.stderr!r}; "
                f"servers {self.server_processes()}; run folder {self.files()}; "
                f"log:\n{self.log_text()}"
            ) from None

    def served(self) -> list[Served]:
        """Every ``served`` line of every server log of this world, but ``zuno server ...``."""
        lines: list[Served] = []
        if not self.folder.is_dir():
            return lines
        for log in sorted(self.folder.glob("server-*.log")):
            for line in log.read_text(errors="replace").splitlines():
                match = _SERVED.search(line)
                if match and not match.group(4).startswith("server"):
                    lines.append(
                        Served(
                            log.name,
                            int(match.group(1)),
                            match.group(2),
                            int(match.group(3)),
                            match.group(4),
                        )
                    )
        return lines

    def files(self) -> list[str] | None:
        """The names in the run folder (None when there is none)."""
        return sorted(p.name for p in self.folder.iterdir()) if self.folder.is_dir() else None

    def log_text(self) -> str:
        """All server logs of this world, for failure messages."""
        if not self.folder.is_dir():
            return "(no run folder)"
        return "\n".join(
            p.read_text(errors="replace") for p in sorted(self.folder.glob("server-*.log"))
        )

    def server_processes(self) -> list[int]:
        """Live command servers of this world's run folder (whatever their key)."""
        marker = b"zuno.cli.cmdserver\0" + os.fsencode(self.folder) + b"\0"
        return processes_with(marker)

    def stop(self) -> None:
        """Stop every server this world started: ``zuno server stop``, then SIGKILL by pid."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.zuno("server", "stop", timeout=60)
        for pid in sorted(self.pids | set(self.server_processes())):
            if alive(pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if self.own_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
