"""What the fleet fault suite needs: a TCP relay, simulated hosts, a careful model.

- :class:`Relay` stands between a host and PostgreSQL on 127.0.0.1. It passes
  bytes through, holds them (a partition: nothing crosses until it heals), or
  resets every connection and refuses new ones (an outage).
- :class:`Host` runs ``zuno worker`` as another machine would: its own PID and
  mount namespaces, its own ``/etc/machine-id`` and boot id (bind-mounted), its
  own route to the database (a relay) and, if asked, a clock shifted by some
  seconds (``time.time`` of its Python, through a ``sitecustomize``).
- :class:`CarefulModel` plays each session's script as a careful model does:
  after a recovery notice it looks (``read`` of the marks folder) and redoes a
  call whose mark it does not find.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from fleet_model import FleetModelServer

__all__ = [
    "CarefulModel",
    "Host",
    "Relay",
    "namespaces_work",
    "pg_target",
    "relayed_dsn",
]


class Relay:
    """A TCP relay to ``target`` on 127.0.0.1 that can partition, delay and reset."""

    def __init__(self, target: tuple[str, int] | str) -> None:
        self.target = target
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._held = threading.Event()  # set: a partition (bytes wait, nothing crosses)
        self._down = False  # an outage: connections reset, new ones refused
        self.delay = 0.0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    # The faults ---------------------------------------------------------------

    def partition(self) -> None:
        """Hold every byte in both directions until :meth:`heal` (connections stay open)."""
        self._held.set()

    def heal(self) -> None:
        """End a partition or an outage: bytes flow again."""
        self._down = False
        self._held.clear()

    def outage(self) -> None:
        """Reset every connection and refuse new ones until :meth:`heal`."""
        self._down = True
        self.reset()

    def reset(self) -> None:
        """Close every connection now, with a TCP reset."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _rst(sock)

    def close(self) -> None:
        self._closed = True
        self.reset()
        with suppress(OSError):
            self._server.close()

    # The plumbing --------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self._down:
                _rst(client)
                continue
            try:
                if isinstance(self.target, str):  # the server's Unix socket
                    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    upstream.connect(self.target)
                else:
                    upstream = socket.create_connection(self.target, timeout=5)
                    upstream.settimeout(None)
            except OSError:
                _rst(client)
                continue
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                while self._held.is_set() and not self._closed:
                    time.sleep(0.02)
                data = source.recv(65536)
                if not data:
                    break
                if self.delay:
                    time.sleep(self.delay)
                while self._held.is_set() and not self._closed:
                    time.sleep(0.02)
                sink.sendall(data)
        except OSError:
            pass
        while self._held.is_set() and not self._closed:
            time.sleep(0.02)  # a partition carries no end of stream either
        with suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _rst(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with suppress(OSError):
        sock.close()


def relayed_dsn(dsn: str, relay: Relay) -> str:
    """``dsn`` with its host and port replaced by the relay's."""
    parts = urlsplit(dsn)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{relay.port}"))


def pg_target(dsn: str) -> tuple[str, int] | str:
    """Where the server of ``dsn`` listens: (host, port), or the path of its Unix socket."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        host, port = conn.info.host, conn.info.port
    if host.startswith("/"):
        return f"{host}/.s.PGSQL.{port}"
    return host, port


_NAMESPACE = ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "--kill-child"]


def namespaces_work() -> bool:
    """Whether a host can be simulated here (root, with unshare and bind mounts)."""
    try:
        probe = subprocess.run(
            [*_NAMESPACE, "sh", "-c", "mount --bind /etc/hostname /etc/hostname"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


_SITE = """
import os, time
_shift = float(os.environ.get("ZUNO_TEST_CLOCK_SHIFT") or 0)
if _shift:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _shift
    time.time_ns = lambda: _time_ns() + int(_shift * 1e9)
"""

_STARTED = re.compile(r"\((w1:[^)]+)\) started")


@dataclass
class Host:
    """A simulated machine running one ``zuno worker``.

    Args:
        name: For its files and logs.
        root: A folder for its identity files and log.
        dsn: How it reaches the store (through its relay, usually).
        env: The environment (model, lease) shared by the fleet.
        clock_shift: Seconds its clock is ahead (negative: behind).
    """

    name: str
    root: Path
    dsn: str
    env: dict[str, str]
    clock_shift: float = 0.0
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.root / f"{self.name}.log"

    def start(self, *args: str) -> None:
        """``zuno worker ARGS`` on this host."""
        folder = self.root / f"{self.name}-host"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "machine-id").write_text(uuid.uuid4().hex + "\n")
        (folder / "boot_id").write_text(str(uuid.uuid4()) + "\n")
        site = folder / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(_SITE)
        env = {
            **self.env,
            "ZUNO_DB": self.dsn,
            "ZUNO_TEST_CLOCK_SHIFT": str(self.clock_shift),
            "PYTHONPATH": os.pathsep.join(
                [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        script = (
            f"mount --bind {folder / 'machine-id'} /etc/machine-id &&"
            f" mount --bind {folder / 'boot_id'} /proc/sys/kernel/random/boot_id &&"
            f' exec {sys.executable} -m zuno worker "$@"'
        )
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*_NAMESPACE, "sh", "-c", script, "worker", *args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.root,
            )

    def worker_id(self) -> str | None:
        found = _STARTED.search(self.text())
        return found.group(1) if found else None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def worker_pid(self) -> int | None:
        """The worker's pid as seen from here (the PID namespace's init)."""
        if self.proc is None:
            return None
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            return None
        pids = [int(x) for x in children.split()]
        return pids[0] if len(pids) == 1 else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """The whole machine dies (every process of its namespace)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        pid = self.worker_pid()
        if pid is not None:
            with suppress(ProcessLookupError):
                os.kill(pid, 15)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class CarefulModel(FleetModelServer):
    """The fleet's scripted model, careful: it redoes a call whose effect it cannot find.

    Task ``NN``'s script: a ``shell`` call that sleeps ``delay`` seconds and then
    appends a line to ``marks/NN.txt``; then it reads the ``marks`` folder and
    answers once ``NN.txt`` is there (a result may say the call never ran). After
    a recovery notice it reads the folder too. When ``NN.txt`` is not there, it
    runs the call again (a new call id).

    With ``fail_first``, the script starts with a ``shell`` call cut off by its
    timeout (a side-effecting Never call whose outcome is uncertain), then reads
    the marks folder (an inspection), then runs the writing call.
    ``hold`` (set by a test): the reply to the request that follows the failed
    call waits until it is cleared (``held`` is set while one waits).
    """

    fail_first: bool = False
    hold: threading.Event = field(default_factory=threading.Event, init=False)
    held: threading.Event = field(default_factory=threading.Event, init=False)

    def reply_for(self, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, str]]]:
        users = [m for m in messages if m.get("role") == "user"]
        found = re.search(r"fleet task (\d+)", _text(users[0])) if users else None
        if found is None:
            return "I have no task.", []
        task = int(found.group(1))
        mark = f"marks/{task:02d}.txt"
        write = {"command": f"sleep {self.delay}; echo ran >> {mark}"}
        last = messages[-1]
        tools = [m for m in messages if m.get("role") == "tool"]
        ids = [str(m.get("tool_call_id", "")) for m in tools]
        if any(i.startswith("f_") for i in ids) and not any(
            i.startswith(("insp_", "look_")) for i in ids
        ):
            while self.hold.is_set():  # the first request after the failure waits
                self.held.set()
                time.sleep(0.05)
        if last.get("role") == "user" and last is not users[0]:
            return "Checking what happened.", [_call(f"insp_{task:02d}_{len(users)}", "read", {})]
        if last.get("role") == "user":
            if self.fail_first:
                # Cut off by its timeout: its outcome is uncertain (it may have acted).
                failing = {"command": "sleep 5", "timeout": 1}
                return "First a check.", [_call(f"f_{task:02d}", "shell", failing)]
            return "Writing.", [_call(f"sh_{task:02d}", "shell", write)]
        last_id = ids[-1] if ids else ""
        if last_id.startswith("f_"):
            return "Looking.", [_call(f"look_{task:02d}", "read", {})]
        if last_id.startswith(("sh_", "redo")):
            # Whatever the result says (it may say the call never ran): look before answering.
            return "Checking it landed.", [_call(f"chk_{task:02d}_{len(ids)}", "read", {})]
        if last_id.startswith(("insp_", "look_", "chk_")):
            listing = _text(tools[-1])
            if f"{task:02d}.txt" in listing:
                return f"task {task:02d} done", []
            n = sum(1 for i in ids if i.startswith(("sh_", "redo")))
            name = "sh" if last_id.startswith("look_") else f"redo{n}"
            return "Writing it (not found).", [_call(f"{name}_{task:02d}", "shell", write)]
        return f"task {task:02d} done", []


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))  # pyright: ignore[reportUnknownArgumentType,reportUnknownMemberType,reportUnknownVariableType]
    return ""


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, str]:
    import json

    if name == "read":
        arguments = {"path": "marks"}
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments)}
