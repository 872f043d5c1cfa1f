"""``--stream``'s writer: everything in order, and never held by a stderr nobody reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from zuno.cli.call_output import RawStream

ZUNO = [sys.executable, "-m", "zuno"]


def test_everything_tapped_comes_out_in_order() -> None:
    read_end, write_end = os.pipe()
    got = bytearray()
    reader = threading.Thread(target=lambda: _read_all(read_end, got))
    reader.start()
    stream = RawStream(write_end, backlog=64 * 1024)
    chunks = [f"chunk {i:05d}\n".encode() * 100 for i in range(300)]
    for i, chunk in enumerate(chunks):
        stream.tap("stdout" if i % 2 else "stderr", chunk)
    stream.close()
    os.close(write_end)
    reader.join(timeout=60)
    assert bytes(got) == b"".join(chunks)
    assert stream.dropped == 0


def test_a_stderr_nobody_reads_does_not_hold_the_command() -> None:
    read_end, write_end = os.pipe()  # never read: its 64 KiB fill, then writes block
    stream = RawStream(write_end, backlog=128 * 1024, stall_s=0.2)
    tapping = threading.Thread(
        target=lambda: [stream.tap("stdout", b"x" * 65536) for _ in range(64)]
    )
    tapping.start()
    tapping.join(timeout=60)
    assert not tapping.is_alive(), "the reading thread was held by a stalled stderr"
    stream.close()
    assert stream.dropped > 0
    os.close(read_end)
    os.close(write_end)


def test_a_closed_stderr_ends_the_stream_quietly() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # `zuno call ... --stream 2>&1 | head -1` after head exited
    stream = RawStream(write_end, backlog=1024)
    for _ in range(100):
        stream.tap("stdout", b"y" * 4096)
    stream.close()
    os.close(write_end)


def test_batch_streams_each_command_and_prints_the_bounded_results(
    workspace: Path, tmp_path: Path
) -> None:
    steps = [
        {"tool": "shell", "args": {"command": "seq 1 3000"}},
        {"tool": "shell", "args": {"command": "echo second-call >&2"}},
    ]
    proc = subprocess.run(
        [*ZUNO, "batch", "-", "--yes", "--stream"],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(tmp_path / "z.db"), "ZUNO_SERVER": "off"},
        input=json.dumps(steps).encode(),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    numbers = "".join(f"{i}\n" for i in range(1, 3001)).encode()
    assert numbers + b"second-call\n" in proc.stderr
    # The result is still the bounded one: 3000 lines are over the 2000-line limit.
    assert b"omitted" in proc.stdout and b"second-call" in proc.stdout


def _read_all(fd: int, into: bytearray) -> None:
    while chunk := os.read(fd, 65536):
        into += chunk
    os.close(fd)
