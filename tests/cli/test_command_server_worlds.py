"""The command server: one server per world, refusals that cost nothing, staleness by content.

A variable read while the server imported (``HOME``) names the server, so a
caller with another value gets a server of its own; a refused request neither
keeps a server alive nor stands in the way of a matching one; an edit that
keeps a file's mtime and size, or an edit inside a dependency, makes the
server stale.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest
from command_server_harness import World, alive, wait_for

from zuno.cli.server_wire import PROTOCOL, connect, pack, receive_frame, send_frame


def test_another_home_gets_a_server_of_its_own(tmp_path: Path) -> None:
    w = World(tmp_path / "w")
    other = {"HOME": str(tmp_path / "other-home")}
    (tmp_path / "other-home").mkdir()
    try:
        first = w.wait_up()
        second = w.wait_up(env=other)
        assert second["pid"] != first["pid"]
        assert second["socket"] != first["socket"]
        before = len(w.served())
        for _ in range(3):
            proc = w.zuno("call", "read", '{"path": "a.txt"}', env=other)
            assert proc.returncode == 0, proc.stderr.decode()
            assert b"alpha" in proc.stdout
        assert len(w.served()) == before + 3, w.log_text()
        assert w.status(env=other)["served"] >= 3
        assert w.status()["pid"] == first["pid"]
        noted = list(w.folder.glob("server-*.env"))
        assert len(noted) == 1 and "HOME" in noted[0].read_text().split()
        assert noted[0].stat().st_mode & 0o777 == 0o600
    finally:
        w.stop()


def _refused_request(path: str) -> bytes | None:
    """A well-formed run request the server must refuse (another interpreter): its answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    try:
        connect(sock, path)
        fields = [PROTOCOL, b"run", b"another-interpreter", b"/", b"18", b"-"]
        fields += [pack([b"zuno", b"tools"]), pack([]), pack([]), pack([]), b""]
        send_frame(sock, pack(fields), [0, 1, 2])
        return receive_frame(sock)
    except OSError:
        return None
    finally:
        sock.close()


def test_refused_requests_do_not_keep_the_server_alive(tmp_path: Path) -> None:
    w = World(tmp_path / "w", idle=3)
    try:
        state = w.wait_up()
        answer = _refused_request(state["socket"])
        assert answer is not None and answer.startswith(b"NO "), answer

        def ended_while_refusing() -> bool:
            _refused_request(state["socket"])
            return not alive(state["pid"])

        wait_for(ended_while_refusing, "the server to end while refusing every request", 60, 0.3)
        assert "(idle)" in w.log_text()
    finally:
        w.stop()


def _copied_world(tmp_path: Path, *dependencies: str) -> tuple[World, Path]:
    """A world whose ``zuno`` (and ``dependencies``) are copies on PYTHONPATH, free to change."""
    copy = tmp_path / "src"
    shutil.copytree(
        Path(__file__).resolve().parents[2] / "src",
        copy,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for name in dependencies:
        module = __import__(name)
        shutil.copytree(
            Path(module.__file__ or "").parent,
            copy / name,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return World(tmp_path / "world", extra={"PYTHONPATH": str(copy)}), copy


def test_edit_keeping_mtime_and_size_makes_the_server_stale(tmp_path: Path) -> None:
    w, copy = _copied_world(tmp_path)
    try:
        first = w.wait_up()
        search = copy / "zuno" / "tools" / "search.py"
        before = search.stat()
        text = search.read_text()
        edited = text.replace("Find files by name pattern.", "Find files by NAME pattern.")
        assert edited != text and len(edited) == len(text)
        search.write_text(edited)
        os.utime(search, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert (search.stat().st_mtime_ns, search.stat().st_size) == (
            before.st_mtime_ns,
            before.st_size,
        )
        proc = w.zuno("tools")
        assert proc.returncode == 0, proc.stderr.decode()
        # What a fresh process prints (Python's own bytecode cache decides what it runs).
        assert proc.stdout == w.cold("tools").stdout
        wait_for(lambda: not alive(first["pid"]), "the stale server to end", 30)
        assert "refused: stale" in w.log_text()
    finally:
        w.stop()


@pytest.mark.parametrize("dependency", ["typer"])
def test_edit_inside_a_dependency_makes_the_server_stale(tmp_path: Path, dependency: str) -> None:
    w, copy = _copied_world(tmp_path, dependency)
    try:
        first = w.wait_up()
        inner = copy / dependency / "colors.py"
        assert inner.exists()
        with inner.open("a") as file:  # in place: no folder on the search path changes
            file.write("# edited\n")
        proc = w.zuno("tools")
        assert proc.returncode == 0, proc.stderr.decode()
        wait_for(lambda: not alive(first["pid"]), "the server to see the dependency change", 30)
        assert "stale" in w.log_text()
    finally:
        w.stop()
