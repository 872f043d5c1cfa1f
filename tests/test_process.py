"""Running commands with a hard deadline: exit status, output, and no process left behind."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import anyio
import pytest

from zuno.execution.process import ProcessResult, run_process


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _marker() -> str:
    """A sleep duration no other process on the machine uses: 100.<random digits>."""
    return f"100.{uuid.uuid4().int % 10**9:09d}"


def _pids_with(marker: str) -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


async def _gone(marker: str) -> bool:
    """Whether every process carrying marker has disappeared (allowing time to reap)."""
    for _ in range(40):
        if not _pids_with(marker):
            return True
        await anyio.sleep(0.05)
    return False


async def _run(
    script: str, time_limit: float | None = 30, grace: float = 1.0
) -> tuple[ProcessResult, bytes, bytes]:
    out = bytearray()
    err = bytearray()
    result = await run_process(
        ["sh", "-c", script],
        cwd=Path("/"),
        env=dict(os.environ),
        time_limit=time_limit,
        on_stdout=out.extend,
        on_stderr=err.extend,
        drain_grace=grace,
    )
    return result, bytes(out), bytes(err)


@pytest.mark.anyio
async def test_exit_code_and_both_streams_are_reported() -> None:
    result, out, err = await _run("echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.signal, result.timed_out) == (3, None, False)
    assert out == b"out\n"
    assert err == b"err\n"


@pytest.mark.anyio
async def test_a_signal_death_is_reported_as_the_signal() -> None:
    result, _, _ = await _run("kill -TERM $$")
    assert result.exit_code is None
    assert result.signal == signal.SIGTERM
    assert result.signal_name == "SIGTERM"


@pytest.mark.anyio
async def test_deadline_kills_the_tree_even_when_a_grandchild_holds_the_pipes() -> None:
    marker = _marker()
    result, out, _ = await _run(f"echo started; sleep {marker} & sleep {marker}", time_limit=2)
    assert result.timed_out
    assert out == b"started\n"
    # Generous bound from the issue: the deadline plus two seconds, far below the sleep.
    assert result.elapsed < 4
    assert await _gone(marker)


@pytest.mark.anyio
async def test_a_grandchild_in_its_own_session_is_killed_while_its_parent_lives() -> None:
    marker = _marker()
    result, _, _ = await _run(f"setsid sleep {marker} & sleep {marker}", time_limit=2)
    assert result.timed_out
    assert await _gone(marker)


@pytest.mark.anyio
async def test_pipes_held_by_an_escaped_process_are_abandoned_after_the_grace() -> None:
    marker = _marker()
    # The subshell exits at once, orphaning a sleep in a new session that keeps stdout:
    # outside a PID namespace nothing can find it, but the call must still return.
    try:
        result, _, _ = await _run(f"(setsid sleep {marker} &); exit 0", time_limit=2, grace=0.5)
        assert result.timed_out
        assert result.output_abandoned
        assert result.elapsed < 4
    finally:
        for pid in _pids_with(marker):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.anyio
async def test_processes_left_running_after_the_command_exits_are_killed() -> None:
    marker = _marker()
    result, _, _ = await _run(f"sleep {marker} >/dev/null 2>&1 & echo done")
    assert result.exit_code == 0
    assert not result.timed_out
    assert await _gone(marker)


@pytest.mark.anyio
async def test_cancelling_the_caller_kills_the_tree() -> None:
    marker = _marker()
    with anyio.move_on_after(1) as scope:
        await _run(f"sleep {marker} & sleep {marker}", time_limit=None)
    assert scope.cancelled_caught
    assert await _gone(marker)


@pytest.mark.anyio
async def test_large_output_arrives_whole_and_in_order() -> None:
    result, out, _ = await _run("seq 1 200000")
    assert result.exit_code == 0
    assert out == b"".join(f"{i}\n".encode() for i in range(1, 200001))


@pytest.mark.anyio
async def test_a_missing_program_is_an_os_error() -> None:
    with pytest.raises(OSError):
        await run_process(
            ["/nonexistent/zuno-no-such-program"],
            cwd=Path("/"),
            env={},
            time_limit=5,
            on_stdout=lambda _: None,
            on_stderr=lambda _: None,
        )
