"""The command server, attacked through the real ``zuno`` console script.

Every test runs the installed launcher as a subprocess with a private run folder
(``XDG_RUNTIME_DIR``), ``ZUNO_SERVER=on`` and a server of its own world, and
judges what happened on disk, in the store, in the process table and in the
server's log (``served pid=...`` lines), never by timing. A served command must
behave exactly as the same command run in its own process (``ZUNO_SERVER=off``).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import resource
import select
import shutil
import signal
import sqlite3
import stat
import struct
import subprocess
import sys
import tempfile
import termios
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from command_server_harness import (
    ZUNO,
    World,
    alive,
    normalise,
    parent_of,
    processes_with,
    wait_for,
)

NOBODY = 65534


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One server for the tests that do not need a world of their own."""
    w = World(tmp_path_factory.mktemp("cmdserver"))
    try:
        w.wait_up()
        yield w
    finally:
        w.stop()


@pytest.fixture
def own_world(tmp_path: Path) -> Iterator[World]:
    """A world (and servers) for one test only."""
    w = World(tmp_path / "own")
    try:
        yield w
    finally:
        w.stop()


def _workspace(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "a.txt").write_text("alpha\nbeta\n")
    return path


def _summary(args: tuple[str, ...]) -> str:
    """The ``argv=`` of a served line: the first two arguments."""
    return " ".join(args[:2])[:80]


def _assert_served_once(
    w: World, before: int, args: tuple[str, ...], proc: subprocess.CompletedProcess[bytes]
) -> None:
    new = w.served()[before:]
    assert len(new) == 1, f"expected one served command, log:\n{w.log_text()}"
    assert new[0].argv == _summary(args)
    assert (new[0].how, new[0].status) == ("exit", proc.returncode)


# -- 1. the same output, status and effects -------------------------------------------------

EQUIVALENT = {
    "tools": (("tools",), 0),
    "tools-json": (("tools", "--json"), 0),
    "read": (("call", "read", '{"path": "a.txt"}'), 0),
    "write-new": (("call", "write", '{"path": "new.txt", "content": "fresh\\n"}', "--yes"), 0),
    "write-denied": (("call", "write", '{"path": "new.txt", "content": "x"}'), 1),
    "read-missing": (("call", "read", '{"path": "missing.txt"}'), 1),
    "help": (("--help",), 0),
    "usage-error": (("tools", "--bogus"), 2),
    "bad-json": (("call", "read", "{bad"), 1),
}


@pytest.mark.parametrize("case", list(EQUIVALENT))
def test_served_command_is_the_cold_command(world: World, tmp_path: Path, case: str) -> None:
    args, code = EQUIVALENT[case]
    results = {}
    for side in ("cold", "served"):
        ws = _workspace(tmp_path / side)
        env = {"ZUNO_DB": str(tmp_path / f"{side}.db")}
        before = len(world.served())
        proc = world.zuno(*args, served=side == "served", cwd=ws, env=env)
        if side == "served":
            _assert_served_once(world, before, args, proc)
        else:
            assert len(world.served()) == before
        results[side] = proc
        if case == "write-new":
            assert (ws / "new.txt").read_text() == "fresh\n"
        if case == "write-denied":
            assert not (ws / "new.txt").exists()
    cold, served = results["cold"], results["served"]
    assert cold.returncode == code, cold.stderr.decode()
    assert served.returncode == cold.returncode
    assert normalise(served.stdout) == normalise(cold.stdout)
    assert normalise(served.stderr) == normalise(cold.stderr)


@pytest.mark.parametrize(
    "args", [("call",), ("--help",), ("tools", "--json")], ids=["usage-error", "help", "tools"]
)
def test_closed_output_pipe_ends_as_cold(world: World, args: tuple[str, ...]) -> None:
    """stdout and stderr a pipe whose reader is gone: every write fails (EPIPE)."""
    statuses = {}
    for side in ("cold", "served"):
        read_end, write_end = os.pipe()
        os.close(read_end)
        before = len(world.served())
        try:
            proc = subprocess.run(
                [ZUNO, *args],
                cwd=world.ws,
                env={**world.env, "ZUNO_SERVER": "on" if side == "served" else "off"},
                stdin=subprocess.DEVNULL,
                stdout=write_end,
                stderr=write_end,
                timeout=120,
            )
        finally:
            os.close(write_end)
        statuses[side] = proc.returncode
        if side == "served":
            new = world.served()[before:]
            assert [s.argv for s in new] == [_summary(args)], world.log_text()
    assert statuses["served"] == statuses["cold"], world.log_text()


# -- 2. the child takes the caller's world ----------------------------------------------------


def test_child_runs_in_callers_folder_even_an_odd_one(world: World, tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    deep = ws / os.fsdecode(b"odd-\xff dir") / "deeper"
    deep.mkdir(parents=True)
    (deep / "b.txt").write_text("deep-content-7731\n")
    other = ws / "other"
    other.mkdir()
    (other / "c.txt").write_text("other-content-4410\n")

    args = ("call", "read", '{"path": "b.txt"}')
    before = len(world.served())
    proc = world.zuno(*args, cwd=deep)
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"deep-content-7731" in proc.stdout
    _assert_served_once(world, before, args, proc)

    args = ("call", "read", '{"path": "c.txt"}', "--workspace", "../../other")
    before = len(world.served())
    proc = world.zuno(*args, cwd=deep)
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"other-content-4410" in proc.stdout
    _assert_served_once(world, before, args, proc)


def _calls(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT tool, arguments FROM calls ORDER BY started_at").fetchall()


def test_environment_of_each_call_names_its_store(world: World, tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    one, two = f"one-{uuid.uuid4().hex}.txt", f"two-{uuid.uuid4().hex}.txt"
    (ws / one).write_text("1\n")
    (ws / two).write_text("2\n")
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    for db, name in ((first, one), (second, two), (first, one)):
        args = ("call", "read", json.dumps({"path": name}))
        before = len(world.served())
        proc = world.zuno(*args, cwd=ws, env={"ZUNO_DB": str(db)})
        assert proc.returncode == 0, proc.stderr.decode()
        _assert_served_once(world, before, args, proc)
    assert [json.loads(a)["path"] for _, a in _calls(first)] == [one, one]
    assert [json.loads(a)["path"] for _, a in _calls(second)] == [two]
    if world.db.exists():  # the store the server's own environment names
        assert not [a for _, a in _calls(world.db) if one in a or two in a]


@pytest.mark.parametrize("mask", [0o077, 0o022, 0o002], ids=["077", "022", "002"])
def test_written_file_mode_follows_callers_umask(world: World, tmp_path: Path, mask: int) -> None:
    modes = {}
    for side in ("cold", "served"):
        ws = _workspace(tmp_path / side)
        args = ("call", "write", '{"path": "m.txt", "content": "m\\n"}', "--yes")
        before = len(world.served())
        proc = world.zuno(*args, served=side == "served", cwd=ws, umask=mask)
        assert proc.returncode == 0, proc.stderr.decode()
        if side == "served":
            _assert_served_once(world, before, args, proc)
        modes[side] = stat.S_IMODE((ws / "m.txt").stat().st_mode)
    assert modes["served"] == modes["cold"]
    assert modes["served"] & mask == 0


def test_stdin_is_the_callers(world: World, tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    args = ("call", "read", "-")
    before = len(world.served())
    proc = world.zuno(*args, cwd=ws, input=b'{"path": "a.txt"}')
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"alpha" in proc.stdout
    _assert_served_once(world, before, args, proc)

    # A large body on stdin arrives whole (the child reads the caller's pipe itself).
    content = "".join(f"line {i:06d} {uuid.uuid4().hex}\n" for i in range(6000))
    args = ("call", "write", "-", "--yes")
    before = len(world.served())
    proc = world.zuno(
        *args, cwd=ws, input=json.dumps({"path": "big.txt", "content": content}).encode()
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert (ws / "big.txt").read_text() == content
    _assert_served_once(world, before, args, proc)


def _limits(soft: int, hard: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


@pytest.mark.parametrize(("soft", "hard"), [(321, 654), (40000, 50000)], ids=["lowered", "raised"])
def test_resource_limits_are_the_callers(
    world: World, tmp_path: Path, soft: int, hard: int
) -> None:
    probe = f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))"
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode != 0:
        pytest.skip(f"this machine does not let a process set RLIMIT_NOFILE to {soft}:{hard}")
    outputs = {}
    for side in ("cold", "served"):
        ws = _workspace(tmp_path / side)
        args = (
            "call",
            "shell",
            '{"command": "ulimit -Sn; ulimit -Hn; ulimit -c"}',
            "--yes",
            "--new-session",
        )
        before = len(world.served())
        proc = world.zuno(
            *args, served=side == "served", cwd=ws, preexec_fn=lambda: _limits(soft, hard)
        )
        assert proc.returncode == 0, proc.stderr.decode()
        if side == "served":
            _assert_served_once(world, before, args, proc)
        outputs[side] = proc.stdout
    assert f"{soft}\n{hard}\n0\n".encode() in outputs["cold"], outputs["cold"]
    assert normalise(outputs["served"]) == normalise(outputs["cold"])


def _low_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 512))


def test_server_started_with_low_limits_never_lowers_a_caller(own_world: World) -> None:
    """The server has the limits of the command that started it; a caller keeps its own."""
    w = own_world
    started = w.zuno("tools", preexec_fn=_low_files)
    assert started.returncode == 0, started.stderr.decode()
    wait_for(lambda: list(w.folder.glob("*.sock")), "the server to listen", 90)
    server = w.status()["pid"]
    assert (
        "Max open files            256                  512"
        in Path(f"/proc/{server}/limits").read_text()
    )
    args = ("call", "shell", '{"command": "ulimit -Sn; ulimit -Hn"}', "--yes", "--new-session")
    cold = w.cold(*args)
    proc = w.zuno(*args)
    assert proc.returncode == cold.returncode == 0, proc.stderr.decode()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert f"{soft}\n{hard}\n".encode() in cold.stdout
    assert normalise(proc.stdout) == normalise(cold.stdout), w.log_text()


def test_variable_read_at_import_that_differs_is_not_served(world: World, tmp_path: Path) -> None:
    home = tmp_path / "another-home"
    home.mkdir()
    args = ("call", "read", '{"path": "a.txt"}')
    cold = world.cold(*args, env={"HOME": str(home)})
    before = len(world.served())
    proc = world.zuno(*args, env={"HOME": str(home)})
    assert proc.returncode == cold.returncode == 0, proc.stderr.decode()
    assert normalise(proc.stdout) == normalise(cold.stdout)
    assert normalise(proc.stderr) == normalise(cold.stderr)
    assert len(world.served()) == before, world.log_text()


def test_closed_stdin_is_not_handed_over(world: World) -> None:
    """Descriptor 0 closed: a command reading stdin must see it closed, never hang."""
    args = ("call", "read", "-")
    results = {}
    for side in ("cold", "served"):
        try:
            results[side] = subprocess.run(
                [ZUNO, *args],
                cwd=world.ws,
                env={**world.env, "ZUNO_SERVER": "on" if side == "served" else "off"},
                capture_output=True,
                preexec_fn=lambda: os.close(0),
                timeout=30,
            )
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{side}: zuno call read - with stdin closed never ended"
            ) from None
    assert results["served"].returncode == results["cold"].returncode


_WORLD_COMMAND = (
    "pwd; umask; ulimit -Sn; ulimit -Hn; ls /proc/self/fd; env | grep -v ^ZUNO_SERVER= | sort"
)


@pytest.mark.parametrize("mask", [0o022, 0o077], ids=["022", "077"])
def test_command_sees_the_same_world_served(world: World, mask: int) -> None:
    """Folder, umask, limits, descriptors and environment of the command, cold and served."""
    args = ("call", "shell", json.dumps({"command": _WORLD_COMMAND}), "--yes", "--new-session")
    cold = world.cold(*args, umask=mask)
    before = len(world.served())
    proc = world.zuno(*args, umask=mask)
    assert proc.returncode == cold.returncode == 0, proc.stderr.decode()
    _assert_served_once(world, before, args, proc)
    assert normalise(proc.stdout) == normalise(cold.stdout)
    assert f"{mask:04o}".encode() in proc.stdout


def test_concurrent_callers_each_get_their_own_output(world: World, tmp_path: Path) -> None:
    procs = []
    before = len(world.served())
    for n in range(4):
        ws = _workspace(tmp_path / f"ws{n}")
        (ws / "own.txt").write_text("".join(f"caller-{n}-line-{i}\n" for i in range(1500)))
        procs.append(
            subprocess.Popen(
                [ZUNO, "call", "read", '{"path": "own.txt"}'],
                cwd=ws,
                env=world.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    outputs = [p.communicate(timeout=120) for p in procs]
    for n, (proc, (out, err)) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, err.decode()
        assert out.count(f"caller-{n}-line-".encode()) == 1500
        assert b"caller-" not in out.replace(f"caller-{n}-".encode(), b"")
    new = world.served()[before:]
    assert sorted((s.argv, s.status) for s in new) == [("call read", 0)] * 4, world.log_text()


def test_big_environment_is_handed_over_whole(world: World, tmp_path: Path) -> None:
    """A request far larger than one socket read (about 1 MB of environment)."""
    ws = _workspace(tmp_path / "ws")
    big = {f"ZUNO_TEST_BIG_{n}": uuid.uuid4().hex * 3000 for n in range(10)}
    args = ("call", "shell", '{"command": "env | grep -v ^ZUNO_SERVER= | sort | md5sum"}', "--yes")
    cold = world.cold(*args, cwd=ws, env=big)
    before = len(world.served())
    proc = world.zuno(*args, cwd=ws, env=big)
    assert proc.returncode == cold.returncode == 0, proc.stderr.decode()
    assert normalise(proc.stdout) == normalise(cold.stdout)
    _assert_served_once(world, before, args, proc)


# -- 3. signals --------------------------------------------------------------------------------


def _call_rows(db: Path, marker: str) -> list[tuple[str, str | None, str | None]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT status, outcome, reason FROM calls WHERE arguments LIKE ?", (f"%{marker}%",)
        ).fetchall()


def _start_sleep(
    w: World, ws: Path, db: Path, served: bool, marker: str
) -> tuple[subprocess.Popen[bytes], int]:
    env = {**w.env, "ZUNO_DB": str(db), "ZUNO_SERVER": "on" if served else "off"}
    proc = subprocess.Popen(
        [
            ZUNO,
            "call",
            "shell",
            json.dumps({"command": f"sleep {marker}"}),
            "--yes",
            "--new-session",
        ],
        cwd=ws,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        pids = wait_for(
            lambda: processes_with(b"sleep\0" + marker.encode()), "the sleep to start", 90
        )
    except AssertionError:
        proc.kill()
        out, err = proc.communicate(timeout=60)
        raise AssertionError(f"no sleep started: {out!r} {err!r}") from None
    return proc, pids[0]


def _wait_gone(marker: str) -> None:
    wait_for(lambda: not processes_with(b"sleep\0" + marker.encode()), f"sleep {marker} to end", 30)


def _wait_dead(pid: int) -> None:
    wait_for(lambda: not alive(pid), f"process {pid} to end", 30)


def _marker() -> str:
    return f"{900 + os.getpid() % 99}.{uuid.uuid4().int % 10**9:09d}"


SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT]


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_signal_to_launcher_ends_command_as_cold(world: World, tmp_path: Path, signum: int) -> None:
    seen = {}
    for side in ("cold", "served"):
        ws = _workspace(tmp_path / side)
        db = tmp_path / f"{side}.db"
        marker = _marker()
        before = len(world.served())
        proc, _sleep = _start_sleep(world, ws, db, side == "served", marker)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=90)
        _wait_gone(marker)
        # Opening the store settles what a dead process left running.
        assert world.cold("sessions", cwd=ws, env={"ZUNO_DB": str(db)}).returncode == 0
        rows = _call_rows(db, marker)
        new = world.served()[before:]
        if side == "served":
            assert len(new) == 1, world.log_text()
            assert new[0].argv == "call shell"
        else:
            assert new == []
        seen[side] = (proc.returncode, normalise(out), normalise(err), rows)
    assert seen["served"][0] == seen["cold"][0], (seen["cold"], seen["served"])
    assert seen["served"][3] == seen["cold"][3]
    assert all(row[0] != "running" for row in seen["served"][3])
    assert seen["served"][1:3] == seen["cold"][1:3]


def test_sigkill_of_launcher_kills_child_and_command(world: World, tmp_path: Path) -> None:
    rows = {}
    for side in ("cold", "served"):
        ws = _workspace(tmp_path / side)
        db = tmp_path / f"{side}.db"
        marker = _marker()
        before = len(world.served())
        proc, sleep_pid = _start_sleep(world, ws, db, side == "served", marker)
        child = None
        if side == "served":
            server = world.status()["pid"]
            # The served child is the process under the server above the sleep.
            pid: int | None = sleep_pid
            while pid and parent_of(pid) not in (server, None, 0, 1):
                pid = parent_of(pid)
            assert pid and parent_of(pid) == server, "the sleep does not run under the server"
            child = pid
        proc.kill()
        proc.communicate(timeout=60)
        _wait_gone(marker)
        if child is not None:
            _wait_dead(child)
            new = wait_for(
                lambda b=before: world.served()[b:], "the server to log the child's end", 30
            )
            assert [(s.how, s.status) for s in new] == [("signal", signal.SIGKILL)]
        assert world.cold("sessions", cwd=ws, env={"ZUNO_DB": str(db)}).returncode == 0
        rows[side] = _call_rows(db, marker)
    assert rows["served"] == rows["cold"]
    assert rows["served"] and all(status != "running" for status, _, _ in rows["served"])


# -- 4. stale code -------------------------------------------------------------------------------


def _copied_world(tmp_path: Path) -> tuple[World, Path]:
    """A world whose ``zuno`` package is a copy of src (PYTHONPATH), free to change."""
    copy = tmp_path / "src"
    shutil.copytree(
        Path(__file__).resolve().parents[2] / "src",
        copy,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return World(tmp_path / "world", extra={"PYTHONPATH": str(copy)}), copy


def test_changed_code_is_never_served(tmp_path: Path) -> None:
    w, copy = _copied_world(tmp_path)
    try:
        first = w.wait_up()
        before = len(w.served())
        proc = w.zuno("tools")
        assert b"Find files by name pattern." in proc.stdout
        _assert_served_once(w, before, ("tools",), proc)

        # The same size, a new mtime: what an editor does.
        search = copy / "zuno" / "tools" / "search.py"
        text = search.read_text()
        search.write_text(
            text.replace("Find files by name pattern.", "Find files by NAME pattern.")
        )
        proc = w.zuno("tools")
        assert proc.returncode == 0, proc.stderr.decode()
        assert b"Find files by NAME pattern." in proc.stdout
        wait_for(lambda: not alive(first["pid"]), "the stale server to end", 30)
        second = w.wait_up()
        assert second["pid"] != first["pid"]
        before = len(w.served())
        proc = w.zuno("tools")
        assert b"Find files by NAME pattern." in proc.stdout
        _assert_served_once(w, before, ("tools",), proc)

        # A new module on the search path (a folder of sys.path changed).
        (copy / "zuno_extra_module.py").write_text("X = 1\n")
        proc = w.zuno("tools")
        assert proc.returncode == 0, proc.stderr.decode()
        wait_for(lambda: not alive(second["pid"]), "the server to see the search path change", 30)
    finally:
        w.stop()


def test_compiled_bytecode_does_not_make_the_server_stale(tmp_path: Path) -> None:
    """Python writing a .pyc (another process importing a module) changes no code."""
    w, copy = _copied_world(tmp_path)
    try:
        first = w.wait_up()
        uncompiled = sorted(
            ".".join(py.relative_to(copy).with_suffix("").parts)
            for py in (copy / "zuno").rglob("*.py")
            if not py.name.startswith("_")
            and not list((py.parent / "__pycache__").glob(py.stem + ".*.pyc"))
        )
        imported = None
        for module in uncompiled[:5]:
            imported = subprocess.run(
                [_python(), "-c", f"import {module}"],
                env=w.env,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=120,
            )
            if imported.returncode == 0:
                break
        if imported is None or imported.returncode != 0:
            pytest.skip(f"no module left to compile that imports on its own: {uncompiled[:5]}")
        before = len(w.served())
        proc = w.zuno("tools")
        assert proc.returncode == 0, proc.stderr.decode()
        assert w.status()["pid"] == first["pid"], w.log_text()
        _assert_served_once(w, before, ("tools",), proc)
    finally:
        w.stop()


def test_long_run_folder_path_still_gets_a_server(tmp_path: Path) -> None:
    """XDG_RUNTIME_DIR deep enough that the socket's path is over 107 bytes."""
    run = tmp_path / ("r" * 50) / ("u" * 50)
    w = World(tmp_path / "long", run_dir=run)
    try:
        assert len(os.fsencode(w.folder / "server-0123456789abcdef.sock")) > 107
        proc = w.zuno("tools")
        assert proc.returncode == 0, proc.stderr.decode()
        # The server that command started in the background listens, or has ended.
        wait_for(
            lambda: list(w.folder.glob("*.sock")) or not w.server_processes(),
            "the background server to listen or end",
            90,
        )
        assert list(w.folder.glob("*.sock")), f"no server could listen: {w.files()} {w.log_text()}"
        w.wait_up(timeout=30)
        before = len(w.served())
        proc = w.zuno("tools")
        _assert_served_once(w, before, ("tools",), proc)
    finally:
        w.stop()


# -- 5. privacy -------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["mode-0777", "mode-0750", "other-owner", "symlink"])
def test_run_folder_that_is_not_private_is_not_used(own_world: World, how: str) -> None:
    w = own_world
    elsewhere = w.root / "elsewhere"
    if how == "symlink":
        elsewhere.mkdir(mode=0o700)
        w.folder.symlink_to(elsewhere)
    else:
        w.folder.mkdir()
        os.chmod(w.folder, {"mode-0777": 0o777, "mode-0750": 0o750}.get(how, 0o700))
        if how == "other-owner":
            os.chown(w.folder, NOBODY, NOBODY)
    info = os.lstat(w.folder)
    args = ("call", "read", '{"path": "a.txt"}')
    cold = w.cold(*args)
    for _ in range(2):
        proc = w.zuno(*args)
        assert proc.returncode == 0 == cold.returncode, proc.stderr.decode()
        assert normalise(proc.stdout) == normalise(cold.stdout)
        first, _, rest = proc.stderr.partition(b"\n")
        assert first.startswith(b"zuno: command server not used:"), proc.stderr
        assert normalise(rest) == normalise(cold.stderr)
        assert w.server_processes() == []
    after = os.lstat(w.folder)
    assert (after.st_mode, after.st_uid) == (info.st_mode, info.st_uid)
    assert list(w.run_dir.rglob("*.sock")) == []
    if elsewhere.exists():
        assert list(elsewhere.iterdir()) == []


def _python() -> str:
    """The interpreter of the console script (its shebang), as the server's identity names it."""
    return Path(ZUNO).read_text().splitlines()[0].removeprefix("#!").strip()


_CRAFT = """
import os, sys
from zuno.cli.launcher import _request
sys.stdout.write(_request(sys.argv[1:], False).hex())
"""

_SEND = """
import array, os, socket, sys
path, payload = sys.argv[1], bytes.fromhex(sys.stdin.readline().strip())
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    sock.connect(path)
except OSError as error:
    print("CONNECT-FAILED", error.errno)
    raise SystemExit(0)
frame = len(payload).to_bytes(4, "big") + payload
fds = array.array("i", [0, 1, 2]).tobytes()
try:
    sent = sock.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    if sent < len(frame):  # (an empty send after the server answered and closed: EPIPE)
        sock.sendall(frame[sent:])
except OSError as error:
    print("SEND-FAILED", error.errno)
    raise SystemExit(0)
data = b""
while True:
    try:
        chunk = sock.recv(65536)
    except OSError:
        break
    if not chunk:
        break
    data += chunk
print("ANSWER", data.hex())
"""


def _craft(w: World, ws: Path, argv: list[str]) -> bytes:
    """A well-formed request for ``argv`` from ``ws``, made by the launcher's own code."""
    proc = subprocess.run(
        [_python(), "-c", _CRAFT, ZUNO, *argv],
        cwd=ws,
        env=w.env,
        capture_output=True,
        check=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    return proc.stdout


def _send(
    socket_path: Path, payload: bytes, prefix: tuple[str, ...] = (), python: str | None = None
) -> str:
    proc = subprocess.run(
        [*prefix, python or _python(), "-c", _SEND, str(socket_path)],
        input=payload + b"\n",
        capture_output=True,
        cwd="/",
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode(errors="replace").strip()


def _answers(sent: str) -> list[bytes]:
    """The frames of the server's answer (``OK pid``, ``NO why``, ``EX status``)."""
    # What a served child wrote to the sender's stdout comes first.
    last = sent.splitlines()[-1] if sent else ""
    assert last.startswith("ANSWER"), sent
    data, frames = bytes.fromhex(last.removeprefix("ANSWER").strip()), []
    while len(data) >= 4:
        size = int.from_bytes(data[:4], "big")
        frames.append(data[4 : 4 + size])
        data = data[4 + size :]
    return frames


def test_another_uid_cannot_use_the_server(world: World, tmp_path: Path) -> None:
    sock_path = Path(world.status()["socket"])
    sock_info = os.stat(sock_path)
    assert stat.S_ISSOCK(sock_info.st_mode) and stat.S_IMODE(sock_info.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(world.folder).st_mode) == 0o700
    nobody = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")

    ws = _workspace(tmp_path / "ws")

    # Through the files' permissions: nobody cannot reach the socket at all.
    before = len(world.served())
    payload = _craft(world, ws, ["call", "write", '{"path": "pwned.txt", "content": "x"}', "--yes"])
    assert _send(sock_path, payload, nobody, "/usr/bin/python3").startswith("CONNECT-FAILED")

    # Past the files' permissions (a second name for the socket, opened to all):
    # the server itself must tell the peer's uid.
    shared = Path(tempfile.mkdtemp(prefix="zuno-peer-"))
    try:
        os.chmod(shared, 0o755)
        link = shared / "sock"
        os.link(sock_path, link)
        os.chmod(link, 0o666)
        try:
            # The request is good: sent by the server's own uid it is served.
            control = _craft(
                world, ws, ["call", "write", '{"path": "control.txt", "content": "c"}', "--yes"]
            )
            frames = _answers(_send(link, control))
            assert frames and frames[0].startswith(b"OK "), frames
            assert (ws / "control.txt").read_text() == "c"
            assert len(world.served()) == before + 1
            answer = _send(link, payload, nobody, "/usr/bin/python3")
        finally:
            os.chmod(link, 0o600)
    finally:
        shutil.rmtree(shared)
    if "ANSWER" in answer:
        assert not any(f.startswith(b"OK") for f in _answers(answer)), answer
    assert not (ws / "pwned.txt").exists()
    assert len(world.served()) == before + 1


# -- 6. namespaces ---------------------------------------------------------------------------


def _host_served(world: World) -> list[str]:
    log = Path(world.status()["socket"]).with_suffix(".log").name
    return [s.argv for s in world.served() if s.log == log]


@pytest.mark.parametrize(
    "prefix",
    [("unshare", "--pid", "--fork", "--mount-proc"), ("unshare", "--net")],
    ids=["pid+mount", "net"],
)
def test_client_in_another_namespace_is_not_served_by_host_server(
    world: World, tmp_path: Path, prefix: tuple[str, ...]
) -> None:
    ws = _workspace(tmp_path / "ws")
    args = ("call", "read", '{"path": "a.txt"}')
    cold = world.cold(*args, cwd=ws)
    before = _host_served(world)
    proc = world.zuno(*args, cwd=ws, prefix=prefix)
    assert proc.returncode == 0 == cold.returncode, proc.stderr.decode()
    assert normalise(proc.stdout) == normalise(cold.stdout)
    assert normalise(proc.stderr) == normalise(cold.stderr)
    assert _host_served(world) == before


def test_forged_identity_from_another_namespace_is_refused(world: World, tmp_path: Path) -> None:
    """The namespaces a request names are the caller's word; the server must check the peer."""
    ws = _workspace(tmp_path / "ws")
    sock_path = Path(world.status()["socket"])
    before = len(world.served())
    # Made in the host's namespaces, sent from a network namespace of its own.
    payload = _craft(
        world, ws, ["call", "write", '{"path": "escaped.txt", "content": "x"}', "--yes"]
    )
    frames = _answers(_send(sock_path, payload, ("unshare", "--net")))
    assert not any(f.startswith(b"OK") for f in frames), (frames, world.log_text())
    assert not (ws / "escaped.txt").exists()
    assert len(world.served()) == before


_LANDLOCKED = """
import os, sys
from zuno.execution.sandbox._landlock_exec import restrict_self
restrict_self(["/tmp"], ["/dev/null"], True)
os.execv(sys.argv[1], sys.argv[1:])
"""


@pytest.mark.parametrize(
    "confinement",
    [
        pytest.param(("setpriv", "--bounding-set=-all", "--inh-caps=-all"), id="no-capabilities"),
        pytest.param((_python(), "-c", _LANDLOCKED), id="landlock"),
    ],
)
def test_a_more_confined_caller_is_not_served(
    world: World, tmp_path: Path, confinement: tuple[str, ...]
) -> None:
    """A request made outside, sent from a confined process: its command must not run unconfined."""
    ws = _workspace(tmp_path / "ws")
    sock_path = Path(world.status()["socket"])
    before = len(world.served())
    payload = _craft(
        world, ws, ["call", "write", '{"path": "unconfined.txt", "content": "x"}', "--yes"]
    )
    frames = _answers(_send(sock_path, payload, confinement))
    assert not any(f.startswith(b"OK") for f in frames), (frames, world.log_text())
    assert not (ws / "unconfined.txt").exists()
    assert len(world.served()) == before
    assert "confinement differ" in world.log_text() or "not confined" in world.log_text()


# -- 7. commands that never go through the server ---------------------------------------------


@pytest.mark.parametrize("command", ["run", "resume", "mcp", "trust"])
def test_long_lived_commands_run_in_their_own_process(world: World, command: str) -> None:
    before = world.served()
    proc = world.zuno(command, "--help")
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.strip()
    assert world.served() == before


# -- 8. status, stop, idle ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["off", "0", "no", "FALSE"])
def test_server_off_never_starts_one(own_world: World, value: str) -> None:
    w = own_world
    for args in (("tools",), ("call", "read", '{"path": "a.txt"}')):
        proc = w.zuno(*args, env={"ZUNO_SERVER": value})
        assert proc.returncode == 0, proc.stderr.decode()
        assert w.server_processes() == []
    assert not w.folder.exists()


def test_status_shape_and_stop(own_world: World) -> None:
    w = own_world
    w.wait_up()
    assert w.zuno("tools").returncode == 0  # served: `zuno server ...` itself never is
    state = w.status()
    assert set(state) >= {"running", "pid", "socket", "served", "started", "idle_exit"}
    assert state["running"] is True
    assert isinstance(state["pid"], int) and alive(state["pid"])
    assert isinstance(state["served"], int) and state["served"] >= 1
    assert isinstance(state["started"], float) and state["started"] <= time.time()
    assert state["idle_exit"] == 120.0
    sock = Path(state["socket"])
    assert sock.parent == w.folder and stat.S_ISSOCK(os.stat(sock).st_mode)

    proc = w.zuno("server", "stop")
    assert proc.returncode == 0, proc.stderr.decode()
    wait_for(lambda: not alive(state["pid"]), "the server to stop", 30)
    assert not sock.exists()
    after = w.status(env={"ZUNO_SERVER": "off"})
    assert after["running"] is False and after["pid"] is None
    assert isinstance(after["socket"], str) and isinstance(after["served"], int)
    assert isinstance(after["idle_exit"], float), after


def test_server_stop_reports_only_once_the_server_ended(own_world: World) -> None:
    """``zuno server stop`` must not be a command the stopping server waits for."""
    w = own_world
    pid = w.wait_up()["pid"]
    proc = w.zuno("server", "stop")
    assert proc.returncode == 0, proc.stderr.decode()
    _wait_dead(pid)
    lines = w.log_text().splitlines()
    ended = [i for i, line in enumerate(lines) if f"exit pid={pid} " in line]
    stop_ran = [i for i, line in enumerate(lines) if line.endswith("argv=server stop")]
    assert ended, w.log_text()
    # A served stop that ended before its server did waited for itself, then said "stopped".
    assert all(i > ended[0] for i in stop_ran), w.log_text()


def test_server_stop_with_none_running_leaves_none_running(own_world: World) -> None:
    w = own_world
    proc = w.zuno("server", "stop")
    assert proc.returncode == 0, proc.stderr.decode()
    # A server it started would exist by now: the launcher spawns it before running the command.
    assert w.server_processes() == [], w.log_text()


def test_idle_server_exits(tmp_path: Path) -> None:
    w = World(tmp_path / "idle", idle=2)
    try:
        state = w.wait_up()
        wait_for(lambda: not alive(state["pid"]), "the idle server to exit", 60, 0.2)
        assert not Path(state["socket"]).exists()
        assert f"exit pid={state['pid']}" in w.log_text()
    finally:
        w.stop()


# -- 9. a terminal -----------------------------------------------------------------------------


def _on_terminal(w: World, args: tuple[str, ...], served: bool) -> tuple[bytes, int]:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    env = {**w.env, "ZUNO_SERVER": "on" if served else "off"}
    proc = subprocess.Popen(
        [ZUNO, *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=w.ws,
        env=env,
        start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )
    os.close(slave)
    output = b""
    deadline = time.monotonic() + 90
    try:
        while True:
            assert time.monotonic() < deadline, (
                "the terminal was never released (a holder of it lives on)"
            )
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break  # EIO: every holder of the terminal closed it
            if not chunk:
                break
            output += chunk
        return output, proc.wait(timeout=60)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("args", [("--help",), ("tools",)], ids=["help", "tools"])
def test_terminal_output_is_the_same(world: World, args: tuple[str, ...]) -> None:
    cold, cold_status = _on_terminal(world, args, served=False)
    before = len(world.served())
    served, served_status = _on_terminal(world, args, served=True)
    new = world.served()[before:]
    assert [(s.argv, s.how, s.status) for s in new] == [(_summary(args), "exit", cold_status)], (
        world.log_text()
    )
    assert served_status == cold_status == 0
    if args == ("--help",):
        assert b"\x1b[" in cold  # rich's colours on a terminal
    assert served == cold
