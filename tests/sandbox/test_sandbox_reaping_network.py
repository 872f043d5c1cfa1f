"""Reaping and "network off" under bubblewrap and Landlock, judged from outside.

Reaping: after a call returns (or times out, or its background job is
cancelled) no process it started is alive, whatever it did to escape (a new
session, ``nohup``, a background child holding the output pipes), under both
sandboxes and without one. Processes are found by a unique marker in their
argv, by scanning ``/proc``.

Network: with the network off, no socket outside the sandbox can be reached.
Real listeners (a UNIX stream and datagram socket in a folder outside the
workspace and under ``/run``, an abstract UNIX socket, UDP and TCP on
127.0.0.1) must receive nothing.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from sandboxed_shell import run_shell
from zuno.config.loading import Config
from zuno.config.sandbox import SandboxSettings
from zuno.contract.tool import ToolResult
from zuno.core.declarations import Outcome
from zuno.policy.approvals import ApprovalRequest, CallbackApprover
from zuno.session.jobs import JobState
from zuno.session.runtime import Runtime

KINDS = ["bubblewrap", "landlock"]
REAPING_KINDS = [*KINDS, "none"]
"""Reaping holds without a sandbox too: the none sandbox's guard is a subreaper."""

pytestmark = pytest.mark.anyio


@dataclass
class Box:
    workspace: Path
    outside: Path
    artifacts: Path

    async def run(self, command: str, limit: int = 60, **settings: object) -> ToolResult:
        return await run_shell(self.workspace, self.artifacts, command, limit=limit, **settings)


@pytest.fixture
def box(tmp_path: Path) -> Box:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    return Box(ws, outside, tmp_path / "artifacts")


# --- Reaping -------------------------------------------------------------------------


def _with_marker(marker: str) -> list[int]:
    """PIDs whose argv holds marker."""
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv = f.read()
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in argv and state != b"Z":
            found.append(int(entry.name))
    return found


def _gone(marker: str) -> bool:
    """Whether no process with marker is alive, waiting a bounded while for the kernel."""
    for _ in range(200):
        if not _with_marker(marker):
            return True
        time.sleep(0.05)
    return False


def _appeared(marker: str) -> bool:
    for _ in range(600):
        if _with_marker(marker):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def marker() -> Iterator[str]:
    mark = f"zuno-reap-{uuid.uuid4().hex}"
    yield mark
    for pid in _with_marker(mark):  # leave nothing behind when a test fails
        os.kill(pid, 9)


def _sleeper(marker: str) -> str:
    # exec -a puts the marker in argv[0] of a sleep that would outlive any test.
    return f"bash -c 'exec -a {marker} sleep 1000'"


ESCAPES = {
    "setsid": "setsid {sleeper} >/dev/null 2>&1 < /dev/null & echo started",
    "nohup": "nohup {sleeper} >/dev/null 2>&1 & echo started",
    "double fork": "( ( {sleeper} >/dev/null 2>&1 & ) & ) ; echo started",
    "holding the pipes": "{sleeper} & echo started",
    "setsid holding the pipes": "setsid {sleeper} & echo started",
}


@pytest.mark.parametrize("kind", REAPING_KINDS)
@pytest.mark.parametrize("escape", sorted(ESCAPES))
async def test_nothing_a_command_started_outlives_it(
    box: Box, kind: str, escape: str, marker: str
) -> None:
    command = ESCAPES[escape].format(sleeper=_sleeper(marker))
    result = await box.run(command, limit=60, kind=kind)
    # It ended when its own shell did, not at the deadline.
    assert not result.uncertain and "timed out" not in result.output, result.output
    assert "started" in result.output
    assert _gone(marker)


@pytest.mark.parametrize("kind", REAPING_KINDS)
async def test_a_timed_out_command_leaves_nothing_behind(box: Box, kind: str, marker: str) -> None:
    command = f"setsid {_sleeper(marker)} >/dev/null 2>&1 & nohup {_sleeper(marker)} & sleep 1000"
    result = await box.run(command, limit=2, kind=kind)
    assert result.uncertain
    assert _gone(marker)


def _runtime(box: Box, tmp_path: Path, kind: str) -> Runtime:
    def approve(request: ApprovalRequest) -> bool:
        return True

    config = Config(sandbox=SandboxSettings(kind=kind))  # type: ignore[arg-type]
    return Runtime(
        box.workspace, config=config, db_path=tmp_path / "z.db", approver=CallbackApprover(approve)
    )


# A daemon orphaned at once (its parent subshell exits): it is in no session or
# process tree of the job any more.
_ORPHAN = "(setsid {sleeper} >/dev/null 2>&1 &)"


@pytest.mark.parametrize("kind", REAPING_KINDS)
async def test_a_cancelled_background_job_leaves_nothing_behind(
    box: Box, tmp_path: Path, kind: str, marker: str
) -> None:
    orphan = _ORPHAN.format(sleeper=_sleeper(f"{marker}-orphan"))
    # Ready (argv[0] is the bare marker) only once the orphan is out on its own.
    command = (
        f"{orphan}; until pgrep -f {marker}-orphan >/dev/null; do sleep 0.05; done; "
        f"{_sleeper(marker + '-child')} & exec -a {marker} sleep 1000"
    )
    async with _runtime(box, tmp_path, kind) as rt:
        s = rt.open_session()
        started = await rt.call(s, "shell", {"command": command, "background": True})
        assert started.outcome is Outcome.OK, started.output
        job_id = started.data["job_id"] if started.data else ""
        assert await anyio.to_thread.run_sync(_appeared, f"{marker}\0")
        cancelled = await rt.call(s, "bg", {"action": "cancel", "job_id": job_id})
        assert "cancelled" in cancelled.output
        job = rt.jobs.get(job_id)
        assert job is not None and job.state is JobState.CANCELLED
        assert await anyio.to_thread.run_sync(_gone, marker)


@pytest.mark.parametrize("kind", REAPING_KINDS)
async def test_a_finished_background_job_leaves_nothing_behind(
    box: Box, tmp_path: Path, kind: str, marker: str
) -> None:
    orphan = _ORPHAN.format(sleeper=_sleeper(marker))
    command = f"{orphan}; until pgrep -f {marker} >/dev/null; do sleep 0.05; done; echo started"
    async with _runtime(box, tmp_path, kind) as rt:
        s = rt.open_session()
        started = await rt.call(s, "shell", {"command": command, "background": True})
        job_id = started.data["job_id"] if started.data else ""
        waited = await rt.call(s, "bg", {"action": "wait", "job_id": job_id, "timeout": 60})
        assert "succeeded" in waited.output, waited.output
        assert await anyio.to_thread.run_sync(_gone, marker)


# --- Network off ---------------------------------------------------------------------


@dataclass
class Listeners:
    """Real servers outside the sandbox, each checked for anything received."""

    unix_stream: list[str]
    unix_dgram: str
    abstract: str
    udp_port: int
    tcp_port: int
    sockets: list[socket.socket]

    def received(self) -> list[str]:
        got: list[str] = []
        for s in self.sockets:
            try:
                if s.type == socket.SOCK_STREAM:
                    conn, _ = s.accept()
                    conn.close()
                else:
                    s.recv(1024)
            except BlockingIOError:
                continue
            got.append(str(s.getsockname()))
        return got


def _listen(family: int, kind: int, address: str | tuple[str, int]) -> socket.socket:
    s = socket.socket(family, kind)
    s.bind(address)
    if kind == socket.SOCK_STREAM:
        s.listen(8)
    s.setblocking(False)
    return s


@pytest.fixture
def listeners(box: Box) -> Iterator[Listeners]:
    run_dir = Path("/run") / f"zuno-test-{uuid.uuid4().hex[:12]}"
    try:
        run_dir.mkdir()
    except PermissionError:  # not root: a second folder outside the workspace instead
        run_dir = Path(tempfile.mkdtemp(prefix="zuno-test-sockets-"))
    paths = [str(box.outside / "s.sock"), str(run_dir / "s.sock")]
    sockets = [_listen(socket.AF_UNIX, socket.SOCK_STREAM, p) for p in paths]
    dgram = str(run_dir / "d.sock")
    sockets.append(_listen(socket.AF_UNIX, socket.SOCK_DGRAM, dgram))
    abstract = f"zuno-test-{uuid.uuid4().hex}"
    sockets.append(_listen(socket.AF_UNIX, socket.SOCK_STREAM, "\0" + abstract))
    udp = _listen(socket.AF_INET, socket.SOCK_DGRAM, ("127.0.0.1", 0))
    tcp = _listen(socket.AF_INET, socket.SOCK_STREAM, ("127.0.0.1", 0))
    sockets += [udp, tcp]
    for p in [*paths, dgram]:
        os.chmod(p, 0o777)
    yield Listeners(paths, dgram, abstract, udp.getsockname()[1], tcp.getsockname()[1], sockets)
    for s in sockets:
        s.close()
    shutil.rmtree(run_dir, ignore_errors=True)


_REACH = r"""
import socket, sys
paths, dgram, abstract = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
udp, tcp = int(sys.argv[4]), int(sys.argv[5])
def attempt(name, fn):
    try:
        fn()
        print("done", name)
    except OSError as exc:
        print("refused", name, exc)
def unix_stream(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(path); s.send(b"x")
def unix_dgram():
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"x", dgram)
def pair_dgram():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b"x", dgram)
def pair_stream_sendto():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM); a.sendto(b"x", dgram)
def abstract_stream():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect("\0" + abstract)
def udp_send():
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", udp))
def tcp_connect():
    socket.create_connection(("127.0.0.1", tcp), timeout=5).send(b"x")
for p in paths:
    attempt("unix " + p, lambda p=p: unix_stream(p))
for name, fn in [("unix dgram", unix_dgram), ("socketpair dgram", pair_dgram),
                 ("socketpair stream sendto", pair_stream_sendto), ("abstract", abstract_stream),
                 ("udp", udp_send), ("tcp", tcp_connect)]:
    attempt(name, fn)
"""


def _reach_command(ls: Listeners) -> str:
    args = [",".join(ls.unix_stream), ls.unix_dgram, ls.abstract, ls.udp_port, ls.tcp_port]
    quoted = " ".join(f"'{a}'" for a in args)
    return (
        f"python3 -c '{_REACH.replace(chr(39), chr(34))}' {quoted}; "
        f"echo x > /dev/udp/127.0.0.1/{ls.udp_port}; "
        f"echo x | nc -U -w 2 {ls.unix_stream[1]} 2>/dev/null; "
        f"exec 3<>/dev/tcp/127.0.0.1/{ls.tcp_port} && echo x >&3"
    )


@pytest.mark.parametrize("kind", KINDS)
async def test_network_off_reaches_no_socket_outside(
    box: Box, kind: str, listeners: Listeners
) -> None:
    result = await box.run(_reach_command(listeners), kind=kind)
    # Every attempt was made (a sendto may "succeed" into the sandbox's own network).
    attempts = len(listeners.unix_stream) + 6
    assert result.output.count("done ") + result.output.count("refused ") == attempts, result.output
    assert listeners.received() == []


@pytest.mark.parametrize("kind", KINDS)
async def test_with_the_network_on_the_same_sockets_are_reached(
    box: Box, kind: str, listeners: Listeners
) -> None:
    # The control: the listeners and the attempts do work when the network is allowed.
    result = await box.run(_reach_command(listeners), kind=kind, network=True)
    assert len(listeners.received()) == len(listeners.sockets), result.output


@pytest.mark.parametrize("kind", KINDS)
async def test_ordinary_commands_still_work_with_the_network_off(box: Box, kind: str) -> None:
    await anyio.run_process(["git", "init", "-q", str(box.workspace)])
    (box.workspace / "a.txt").write_text("needle\nhay\n")
    found = shutil.which("rg") or str(Path(__file__).parents[2] / ".venv" / "bin" / "rg")
    # A copy beside the workspace: the sandbox's private /tmp hides a checkout (and
    # its .venv) under /tmp, but keeps the workspace's own top folder visible.
    tools = box.outside.parent / "tools"
    tools.mkdir(exist_ok=True)
    rg = str(shutil.copy(found, tools / "rg"))
    command = (
        "printf 'b\\na\\n' | sort | head -1 && "
        "python3 -c 'import socket, subprocess; a, b = socket.socketpair(); "
        'print(subprocess.run(["echo", "py"], capture_output=True, text=True).stdout.strip())\' && '
        f"{rg} -c needle . && git status --porcelain && echo sub > sub.txt && cat sub.txt && "
        "python3 -c 'import multiprocessing as m; m.Lock(); print(m.Pool(2).map(abs, [-7]))' && "
        "(sleep 0.1 & wait) && echo done"
    )
    result = await box.run(command, kind=kind)
    assert result.data is not None and result.data["exit_status"] == 0, result.output
    for expected in ("a\n", "py\n", "a.txt:1", "?? a.txt", "sub\n", "[7]", "done"):
        assert expected in result.output
