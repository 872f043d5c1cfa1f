"""A direct call's command shows its output while it runs, served or not.

``zuno call shell`` at a real terminal (tmux) shows the command's last lines
while it runs, and ``--stream`` on a pipe hands the first chunk over before the
command ends. Each command waits for something the test does after it saw the
first output (a file it creates, a FIFO it writes), so what is asserted is
order, never timing. Each test runs once in its own process and once through
a command server, told apart by the server's log.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from command_server_harness import ZUNO, World
from tmux_pane import HOLD, Pane, plain, tmux_needed

_BOUND_S = 90.0
"""The most a wait may poll before the test fails (a bound, never a measured duration)."""


@pytest.fixture(params=["own process", "served"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """A private world whose ``zuno`` runs in its own process or through a server."""
    served = request.param == "served"
    w = World(tmp_path / "world", extra={"ZUNO_SERVER": "on" if served else "off"})
    try:
        if served:
            w.wait_up()
        yield w
    finally:
        w.stop()


def _check_served(world: World, before: int) -> None:
    if world.env["ZUNO_SERVER"] == "on":
        served = world.served()[before:]
        assert [s.argv for s in served] == ["call shell"], world.log_text()


@tmux_needed
def test_a_terminal_shows_the_commands_output_while_it_runs(world: World) -> None:
    folder = world.root / "tmux"
    folder.mkdir()
    pane = Pane(folder, world.ws, world.env)
    try:
        before = len(world.served())
        command = f"echo first-$((0+1)); echo second-$((1+1)); {HOLD}; echo last-$((2+1))"
        args = json.dumps({"command": command})
        pane.type(shlex.join([ZUNO, "call", "shell", args, "--yes"]))
        seen = plain(
            pane.wait_for(lambda t: "second-2" in plain(t), "the command's output while it runs")
        )
        # Still running: it has not printed its last line, and its result is not out.
        assert "last-3" not in seen and "exit code" not in seen
        assert "running" in seen and "first-1" in seen
        (world.ws / "release").touch()
        done = plain(pane.wait_text("last-3"))
        assert "[exit code 0]" in done
        pane.wait_for(lambda t: plain(t).rstrip().endswith("shell$"), "the shell prompt back")
        # The running lines were erased: what stays is the result, each line once.
        final = plain(pane.screen())
        assert "running" not in final.split("exit code 0")[-1]
        assert final.count("second-2") == 1, final
    finally:
        pane.close()
    _check_served(world, before)


def _read_until(fd: int, needle: bytes, got: bytearray) -> None:
    """Read fd into got until needle shows (bounded wait)."""
    deadline = time.monotonic() + _BOUND_S
    while needle not in got:
        left = deadline - time.monotonic()
        assert left > 0, f"never saw {needle!r} on stderr; got {bytes(got)!r}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk, f"stderr ended before {needle!r}; got {bytes(got)!r}"
            got += chunk


def _open_writer(fifo: Path) -> int:
    """The FIFO's writing end, once the command has opened it for reading (bounded)."""
    deadline = time.monotonic() + _BOUND_S
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: no reader yet
            if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_stream_on_a_pipe_hands_over_the_first_chunk_before_the_command_ends(
    world: World,
) -> None:
    gate = world.ws / "gate"
    os.mkfifo(gate)
    before = len(world.served())
    command = 'echo first-chunk; read line < gate; echo "second:$line"; echo oops >&2'
    proc = subprocess.Popen(
        [
            ZUNO,
            "call",
            "shell",
            json.dumps({"command": command, "timeout": 120}),
            "--yes",
            "--stream",
        ],
        cwd=world.ws,
        env=world.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        streamed = bytearray()
        _read_until(proc.stderr.fileno(), b"first-chunk\n", streamed)
        # The command is still waiting for the gate: nothing of its end, no result yet.
        assert proc.poll() is None and b"second:" not in streamed
        writer = _open_writer(gate)
        os.write(writer, b"opened\n")
        os.close(writer)
        _read_until(proc.stderr.fileno(), b"second:opened\n", streamed)
        rest_out, rest_err = proc.communicate(timeout=_BOUND_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
    streamed += rest_err
    assert proc.returncode == 0, bytes(streamed)
    # stderr had the raw output as it came (the command's two streams are read apart, so
    # only each one's own order holds); stdout has the result as before.
    assert b"first-chunk\n" in streamed and b"second:opened\n" in streamed
    assert streamed.index(b"first-chunk") < streamed.index(b"second:opened")
    assert b"[exit code 0]" in rest_out and b"second:opened" in rest_out
    assert b"[stderr]\noops" in rest_out
    _check_served(world, before)
