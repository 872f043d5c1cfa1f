"""A command's hard deadline holds when nothing outside the command runs any more.

A worker of a PostgreSQL store (one that machines share: there another worker
may take a session over) runs a ``shell`` call; the test then freezes (SIGSTOP) the worker *and*
its fence guard, the two enforcers outside the command. The command must still
die at its deadline, which the guard that runs with it (inside the sandbox
under bubblewrap and Landlock, beside it without one) keeps alone:

- the fence deadline, from the worker's lease (3 s here: the fence comes
  2.5 s after the last renewal), when the command's timeout is longer;
- the command's own timeout (plus a grace), when the lease is long.

The command sleeps, then writes a mark: a mark, or a command still alive,
is a command that outlived its deadline.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zuno.execution.sandbox.policy import GUARD
from zuno.execution.sandbox.probing import probe_bubblewrap, probe_landlock

_WORKER = """
import json, sys
from pathlib import Path
import anyio
from zuno.config.loading import Config
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime
from zuno.durability.store import open_store

workspace, dsn, kind, timeout = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
config = Config.model_validate({"sandbox": {"kind": kind}})
rt = Runtime(workspace, config=config, store=open_store(dsn), approver=ApproveAll())
session = rt.open_session()
command = "echo $$ > command.pid; sleep 8; echo ran > mark"


async def main() -> None:
    result = await rt.call(session, "shell", {"command": command, "timeout": timeout})
    print(result.outcome.value, flush=True)


anyio.run(main)
"""


def _backends() -> list[str]:
    kinds = ["none"]
    if probe_bubblewrap().available:
        kinds.append("bubblewrap")
    if probe_landlock().available:
        kinds.append("landlock")
    return kinds


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _fence_guards(worker: int) -> list[int]:
    """The fence guards the worker started (``_fence_guard.py`` among its children)."""
    try:
        children = Path(f"/proc/{worker}/task/{worker}/children").read_text().split()
    except OSError:
        return []
    found: list[int] = []
    for child in map(int, children):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"_fence_guard.py" in cmdline:
            found.append(child)
    return found


def _wait_for(what: str, check: object, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if callable(check) and check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("kind", _backends())
@pytest.mark.parametrize(
    ("lease", "timeout"), [("3", 60), ("60", 1)], ids=["fence-deadline", "own-timeout"]
)
def test_a_frozen_worker_and_fence_guard_cannot_keep_a_command_past_its_deadline(
    tmp_path: Path, pg_dsn: str, kind: str, lease: str, timeout: int
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER, str(workspace), pg_dsn, kind, str(timeout)],
        env={**os.environ, "ZUNO_LEASE_SECONDS": lease},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    frozen: list[int] = []
    try:
        pid_file = workspace / "command.pid"
        _wait_for("the command to start", lambda: pid_file.exists() and pid_file.read_text())
        _wait_for("the fence guard", lambda: _fence_guards(worker.pid))
        for pid in [worker.pid, *_fence_guards(worker.pid)]:
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)
        stopped = time.monotonic()
        # Not yet killed by anything outside the sandbox (the worker's own timeout
        # handling, the fence guard): both are frozen from here on.
        # Past the moment the command would write its mark (it sleeps 8 s).
        time.sleep(max(0.0, stopped + 10 - time.monotonic()))
        assert not (workspace / "mark").exists(), "the command outlived its deadline"
        # The pid as the command saw it: in its own PID namespace under a sandbox,
        # so only the absence of the mark judges there.
        if kind == "none":
            assert not _alive(int(pid_file.read_text()))
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        worker.kill()
        worker.wait(timeout=30)


def _guard(*options: str, command: str, pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(GUARD), "0", *options, "--", "sh", "-c", command],
        stderr=subprocess.PIPE,
        text=True,
        pass_fds=pass_fds,
    )


def test_a_guard_with_no_near_deadline_lets_its_command_end_as_it_ends() -> None:
    """A lease that ended tells the guard "no deadline" (a far one): the command runs on."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"until 1e12\n")
        guard = _guard(
            "--until", "1e12", "--fence", str(read_end), command="exit 3", pass_fds=(read_end,)
        )
        assert guard.wait(timeout=60) == 3
        assert guard.stderr is not None and guard.stderr.read() == ""
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_guard_whose_worker_is_gone_kills_its_command() -> None:
    """The fence pipe ends (the worker died): the command is killed at once."""
    read_end, write_end = os.pipe()
    guard = _guard("--fence", str(read_end), command="sleep 60", pass_fds=(read_end,))
    os.close(read_end)
    os.close(write_end)
    assert guard.wait(timeout=60) == -signal.SIGKILL  # sleep itself would end with 0
