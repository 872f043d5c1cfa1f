"""Escape attempts under workspace-write with the network off, for bubblewrap and Landlock.

Each attempt runs a real command through the shell tool under a real sandbox
and then checks the file system or the listener from outside: the refusal is
judged by what did not happen, not by the command's own report.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandboxed_shell import run_shell
from zuno.contract.tool import ToolResult

KINDS = ["bubblewrap", "landlock"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Box:
    """A workspace inside a parent folder, with a sibling folder outside it."""

    root: Path
    parent: Path
    workspace: Path
    outside: Path
    artifacts: Path

    async def run(self, command: str, **settings: object) -> ToolResult:
        return await run_shell(self.workspace, self.artifacts, command, limit=30, **settings)


def _status(result: ToolResult) -> object:
    """The command's exit status: a refused write makes it non-zero, not an error outcome."""
    assert result.data is not None, result.output
    return result.data["exit_status"]


@pytest.fixture
def box(tmp_path: Path) -> Box:
    parent = tmp_path / "parent"
    workspace = parent / "ws"
    outside = tmp_path / "outside"
    workspace.mkdir(parents=True)
    outside.mkdir()
    return Box(tmp_path, parent, workspace, outside, tmp_path / "artifacts")


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    yield server
    server.close()


def _accepted_any(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def _connect_command(port: int) -> str:
    # bash's /dev/tcp needs nothing from outside the sandbox (a venv's python under
    # /tmp is hidden by the sandbox's private /tmp).
    return f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo C"


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_writing_outside_the_workspace_is_refused(box: Box, kind: str) -> None:
    target = box.outside / "direct"
    result = await box.run(f"echo x > {target}", kind=kind)
    assert _status(result) != 0
    assert not target.exists()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_symlink_in_the_workspace_does_not_lead_out(box: Box, kind: str) -> None:
    (box.workspace / "link").symlink_to(box.outside)
    result = await box.run("echo x > link/through-symlink", kind=kind)
    assert _status(result) != 0
    assert not (box.outside / "through-symlink").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_proc_self_root_does_not_lead_out(box: Box, kind: str) -> None:
    target = box.outside / "through-proc"
    result = await box.run(f"echo x > /proc/self/root{target}", kind=kind)
    assert _status(result) != 0
    assert not target.exists()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_renaming_the_workspace_parent_is_refused(box: Box, kind: str) -> None:
    moved = box.root / "moved"
    result = await box.run(f"mv {box.parent} {moved}", kind=kind)
    assert _status(result) != 0
    assert box.workspace.is_dir()
    assert not moved.exists()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_connecting_to_a_local_listener_is_refused(
    box: Box, kind: str, listener: socket.socket
) -> None:
    result = await box.run(_connect_command(listener.getsockname()[1]), kind=kind)
    assert _status(result) != 0
    # Refused by the sandbox, not failing for another reason.
    assert "No such file" not in result.output and "not found" not in result.output
    assert not _accepted_any(listener)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_the_network_setting_lets_the_same_connection_through(
    box: Box, kind: str, listener: socket.socket
) -> None:
    # The control for the refusal above: the listener and the command do work.
    result = await box.run(_connect_command(listener.getsockname()[1]), kind=kind, network=True)
    assert _status(result) == 0, result.output
    assert _accepted_any(listener)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_the_workspace_and_the_private_tmp_are_writable(box: Box, kind: str) -> None:
    result = await box.run(
        'echo inside > made.txt && echo temp > "$TMPDIR/t" && cat "$TMPDIR/t"', kind=kind
    )
    assert _status(result) == 0, result.output
    assert "temp" in result.output
    assert (box.workspace / "made.txt").read_text() == "inside\n"


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_the_private_tmp_is_private_and_discarded(box: Box, kind: str) -> None:
    first = await box.run('echo one > "$TMPDIR/kept"; echo "$TMPDIR"', kind=kind)
    second = await box.run('cat "$TMPDIR/kept"', kind=kind)
    assert _status(first) == 0
    assert _status(second) != 0


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_read_only_mode_refuses_workspace_writes(box: Box, kind: str) -> None:
    (box.workspace / "existing.txt").write_text("before\n")
    result = await box.run(
        "echo after > existing.txt; echo new > new.txt; cat existing.txt",
        kind=kind,
        mode="read-only",
    )
    assert _status(result) != 0 or "before" in result.output
    assert (box.workspace / "existing.txt").read_text() == "before\n"
    assert not (box.workspace / "new.txt").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
async def test_configured_writable_roots_are_writable(box: Box, kind: str) -> None:
    result = await box.run(
        f"echo extra > {box.outside}/granted", kind=kind, writable_roots=[str(box.outside)]
    )
    assert _status(result) == 0, result.output
    assert (box.outside / "granted").read_text() == "extra\n"
