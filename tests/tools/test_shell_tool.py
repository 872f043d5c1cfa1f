"""The shell and execute tools: declarations, results, limits, deadlines and artifacts."""

from __future__ import annotations

import os
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from zuno.config.sandbox import SandboxSettings
from zuno.contract.output import ArtifactStore, BoundedOutput, OutputLimits
from zuno.contract.tool import (
    ArgumentsRejected,
    PathOutsideWorkspace,
    ToolContext,
    ToolError,
    ToolResult,
)
from zuno.core.declarations import Concurrency, Effect, Replay
from zuno.tools.shell import ExecuteArgs, ExecuteTool, ShellArgs, ShellTool


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class _Config:
    sandbox: SandboxSettings


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def _ctx(
    workspace: Path,
    settings: SandboxSettings | None = None,
    limits: OutputLimits | None = None,
    services: Any = None,
    config: Any = None,
) -> ToolContext:
    if config is None and settings is not None:
        config = _Config(settings)
    return ToolContext(
        workspace=workspace,
        session_id="s1",
        call_id=f"call-{uuid.uuid4().hex[:8]}",
        attempt=1,
        limits=limits or OutputLimits(),
        artifacts=ArtifactStore(workspace.parent / "artifacts"),
        config=config,  # type: ignore[arg-type]
        services=services,
    )


async def _shell(workspace: Path, command: str, **kwargs: Any) -> ToolResult:
    timeout = kwargs.pop("timeout", None)
    workdir = kwargs.pop("workdir", None)
    args = ShellArgs(command=command, timeout=timeout, workdir=workdir)
    return await ShellTool().run(args, _ctx(workspace, **kwargs))


def _read(path: Path) -> bytes:
    return path.read_bytes()


def _marker() -> str:
    return f"100.{uuid.uuid4().int % 10**9:09d}"


def _alive(marker: str) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        return True
            except OSError:
                pass
    return False


async def _gone(marker: str) -> bool:
    for _ in range(40):
        if not _alive(marker):
            return True
        await anyio.sleep(0.05)
    return False


def test_declarations_follow_the_background_flag() -> None:
    tool = ShellTool()
    fg = tool.declare(ShellArgs(command="ls"))
    bg = tool.declare(ShellArgs(command="ls", background=True))
    assert (fg.effect, fg.replay, fg.concurrency) == (
        Effect.SIDE_EFFECTING,
        Replay.NEVER,
        Concurrency.EXCLUSIVE,
    )
    assert bg.concurrency is Concurrency.ISOLATED_BACKGROUND
    assert bg.replay is Replay.NEVER
    assert ShellTool.mixed
    assert ExecuteTool().declare(ExecuteArgs(argv=["ls"])).concurrency is Concurrency.EXCLUSIVE


def test_permission_subjects(workspace: Path) -> None:
    assert ShellTool().rule_subject(ShellArgs(command="git status"), workspace) == "git status"
    argv = ["git", "commit", "-m", "two words"]
    subject = ExecuteTool().rule_subject(ExecuteArgs(argv=argv), workspace)
    assert subject == "git commit -m 'two words'"


def test_schemas_state_their_limits() -> None:
    shell = ShellTool().schema()
    execute = ExecuteTool().schema()
    assert shell["required"] == ["command"]
    assert "120" in shell["properties"]["timeout"]["description"]
    assert execute["properties"]["argv"]["minItems"] == 1
    assert "50 KiB" in ShellTool.description
    assert "network is off" in ExecuteTool.description


@pytest.mark.anyio
async def test_output_and_exit_code(workspace: Path) -> None:
    # A command that ran to its end is a completed call, whatever its status (issue 9).
    result = await _shell(workspace, "echo out; echo err >&2; exit 3")
    assert not result.is_error
    assert not result.uncertain
    assert result.output == "[exit code 3]\nout\n[stderr]\nerr"
    assert result.data is not None
    assert result.data["exit_code"] == 3 and result.data["exit_status"] == 3
    assert result.data["sandbox"] == "bubblewrap"


@pytest.mark.anyio
async def test_success_is_not_an_error(workspace: Path) -> None:
    result = await _shell(workspace, "true")
    assert not result.is_error
    assert result.output == "[exit code 0]\n(no output)"


@pytest.mark.anyio
async def test_timeout_is_uncertain_and_leaves_no_process(workspace: Path) -> None:
    marker = _marker()
    result = await _shell(workspace, f"echo begun; sleep {marker} & sleep {marker}", timeout=2)
    assert result.uncertain
    assert result.is_error
    assert "begun" in result.output
    assert "timed out after 2 s" in result.output
    assert result.data is not None and result.data["timed_out"]
    # The deadline plus two seconds, as the issue allows; the sleeps would take 100 s.
    assert result.data["duration_s"] < 4
    assert await _gone(marker)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["landlock", "none"])
async def test_timeout_leaves_no_process_without_a_pid_namespace(
    workspace: Path, kind: str
) -> None:
    marker = _marker()
    settings = SandboxSettings(kind=kind)  # type: ignore[arg-type]
    result = await _shell(
        workspace, f"sleep {marker} & sleep {marker}", timeout=2, settings=settings
    )
    assert result.uncertain
    assert await _gone(marker)


@pytest.mark.anyio
async def test_timeout_over_the_maximum_is_refused(workspace: Path) -> None:
    settings = SandboxSettings(timeout_default=10, timeout_max=30)
    with pytest.raises(ArgumentsRejected, match="maximum of 30 s"):
        await _shell(workspace, "true", timeout=31, settings=settings)


@pytest.mark.anyio
async def test_workdir_is_relative_to_the_workspace(workspace: Path) -> None:
    (workspace / "sub").mkdir()
    result = await _shell(workspace, "pwd", workdir="sub")
    assert result.output.splitlines()[1] == str((workspace / "sub").resolve())


@pytest.mark.anyio
async def test_workdir_outside_the_workspace_is_refused(workspace: Path) -> None:
    with pytest.raises(PathOutsideWorkspace):
        await _shell(workspace, "pwd", workdir="..")
    with pytest.raises(ArgumentsRejected, match="not a folder"):
        await _shell(workspace, "pwd", workdir="missing")


@pytest.mark.anyio
async def test_large_output_is_bounded_with_the_full_text_in_an_artifact(
    workspace: Path,
) -> None:
    limits = OutputLimits()
    command = (
        "seq 1 500000; "
        "head -c 300000 /dev/zero | tr '\\0' 'e' >&2; echo >&2; echo LAST-ERROR-LINE >&2; exit 4"
    )
    result = await _shell(workspace, command, limits=limits)
    assert len(result.output.encode()) <= limits.max_bytes
    assert result.output.count("\n") <= limits.max_lines
    assert result.output.startswith("[exit code 4]\n1\n2\n3\n")
    assert "500000\n" in result.output
    assert result.output.endswith("LAST-ERROR-LINE")
    assert result.data is not None
    stdout_artifact = Path(result.data["stdout_artifact"])
    assert result.artifact == stdout_artifact
    expected = b"".join(f"{i}\n".encode() for i in range(1, 500001))
    assert _read(stdout_artifact) == expected
    assert len(_read(Path(result.data["stderr_artifact"]))) == 300000 + 1 + 16
    assert str(stdout_artifact) in result.output


@pytest.mark.anyio
async def test_a_capped_artifact_keeps_the_first_and_last_parts(workspace: Path) -> None:
    cap = 64 * 1024
    config = SimpleNamespace(tool_output=SimpleNamespace(artifact_max_bytes=cap))
    command = "seq 1 300000; seq 1 100000 >&2; echo LAST-ERROR-LINE >&2"
    result = await _shell(workspace, command, config=config)
    assert "the middle was dropped" in result.output
    assert result.output.startswith("[exit code 0]\n")
    assert result.output.endswith("LAST-ERROR-LINE")
    assert result.data is not None
    expected = b"".join(f"{i}\n".encode() for i in range(1, 300001))
    assert result.data["stdout_bytes"] == len(expected)
    saved = _read(Path(result.data["stdout_artifact"]))
    first, marker, last = saved[: cap // 2], saved[cap // 2 : -cap // 2], saved[-cap // 2 :]
    assert first == expected[: cap // 2]
    assert last == expected[-cap // 2 :]
    dropped = len(expected) - cap
    assert f"({dropped} bytes) dropped from the middle of this stdout".encode() in marker
    assert _read(Path(result.data["stderr_artifact"])).endswith(b"\n100000\nLAST-ERROR-LINE\n")


@pytest.mark.parametrize("cap", [2, 3, 1000, 4097])
def test_a_capped_artifact_is_exact_whatever_the_chunking(tmp_path: Path, cap: int) -> None:
    rng = random.Random(cap)
    path = tmp_path / "out.txt"
    for total in (cap, cap + 1, 7 * cap + 5, 40 * cap):
        stream = rng.randbytes(total)
        bounded = BoundedOutput(OutputLimits(max_bytes=1, max_lines=1), path, cap)
        fed = 0
        while fed < total:
            step = rng.randint(1, 3 * cap)
            bounded.feed(stream[fed : fed + step])
            fed += step
        bounded.finish()
        saved = path.read_bytes()
        if total <= cap:
            assert saved == stream
        else:
            assert saved[: cap - cap // 2] == stream[: cap - cap // 2]
            assert saved[len(saved) - cap // 2 :] == stream[total - cap // 2 :]
            assert f"({total - cap} bytes) dropped".encode() in saved


@pytest.mark.parametrize("cap", [1000, 4097, 3 << 20])
def test_a_capped_artifact_is_exact_wherever_the_ring_ends(tmp_path: Path, cap: int) -> None:
    """Every place the ring's end can fall: its newer piece shorter or longer than its
    older one, and than the marker, which the rewrite in place moves around."""
    head, tail = cap - cap // 2, cap // 2
    path = tmp_path / "out.txt"
    rng = random.Random(cap)
    ends = {0, 1, 5, 300, tail // 2 - 1, tail // 2, tail // 2 + 1, tail - 300, tail - 1}
    for end in sorted(ends):
        total = head + 3 * tail + end
        stream = rng.randbytes(total)
        bounded = BoundedOutput(OutputLimits(max_bytes=1, max_lines=1), path, cap)
        for start in range(0, total, 65536):
            bounded.feed(stream[start : start + 65536])
        bounded.finish()
        saved = path.read_bytes()
        marker = saved[head : len(saved) - tail]
        assert saved[:head] == stream[:head], end
        assert saved[len(saved) - tail :] == stream[total - tail :], end
        assert marker.startswith(b"\n[... ") and marker.endswith(b" are kept ...]\n"), end


def test_an_artifact_cap_under_two_bytes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 2"):
        BoundedOutput(OutputLimits(), tmp_path / "out.txt", 1)


@pytest.mark.anyio
async def test_small_output_keeps_no_artifact(workspace: Path) -> None:
    result = await _shell(workspace, "echo small")
    assert result.artifact is None
    assert result.data is not None and result.data["stdout_artifact"] is None


@pytest.mark.anyio
async def test_invalid_utf8_is_replaced(workspace: Path) -> None:
    result = await _shell(workspace, r"printf 'ok \377\376 done\n'")
    assert "ok \ufffd\ufffd done" in result.output


@pytest.mark.anyio
async def test_secret_looking_variables_are_withheld(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZUNO_TEST_TOKEN", "hunter2")
    monkeypatch.setenv("ZUNO_TEST_PLAIN", "visible")
    result = await _shell(workspace, 'echo "${ZUNO_TEST_TOKEN:-withheld} $ZUNO_TEST_PLAIN"')
    assert result.output.splitlines()[1] == "withheld visible"


@pytest.mark.anyio
async def test_none_runs_unsandboxed_only_when_named(workspace: Path, tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"
    result = await _shell(workspace, f"echo x > {target}", settings=SandboxSettings(kind="none"))
    assert result.data is not None and result.data["sandbox"] == "none"
    assert target.read_text() == "x\n"


@pytest.mark.anyio
async def test_execute_runs_argv_without_a_shell(workspace: Path) -> None:
    args = ExecuteArgs(argv=["echo", "$HOME", "a b"])
    result = await ExecuteTool().run(args, _ctx(workspace))
    assert result.output == "[exit code 0]\n$HOME a b"


@pytest.mark.anyio
async def test_execute_of_a_missing_program_is_refused(workspace: Path) -> None:
    # Refused before a sandbox starts (issue 9: blocked, not a failed run).
    args = ExecuteArgs(argv=["zuno-no-such-program"])
    with pytest.raises(ArgumentsRejected, match="zuno-no-such-program"):
        await ExecuteTool().run(args, _ctx(workspace))


@pytest.mark.anyio
async def test_background_needs_the_job_lane(workspace: Path) -> None:
    args = ShellArgs(command="sleep 1", background=True)
    with pytest.raises(ToolError, match="background jobs are not available"):
        await ShellTool().run(args, _ctx(workspace))


def test_startup_check_passes_with_a_working_sandbox() -> None:
    ShellTool().startup_check()
    ExecuteTool(SandboxSettings(kind="landlock")).startup_check()


@pytest.mark.anyio
async def test_settings_given_at_construction_apply_without_a_configuration(
    workspace: Path,
) -> None:
    tool = ShellTool(SandboxSettings(kind="landlock"))
    result = await tool.run(ShellArgs(command="true"), _ctx(workspace))
    assert result.data is not None and result.data["sandbox"] == "landlock"
