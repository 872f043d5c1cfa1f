"""Interactive processes through the Python API: prompts, waiting for input, Ctrl-C,
kill, deadline, pipes, and the end of the runtime.

Judged by what happened: the answer a prompt wrote to disk, processes found (or no
longer found) in /proc by a marker, the texts the model reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from exec_harness import PROMPT, alive, appeared, exec_runtime, gone, new_marker, sleeper

from zuno.core.declarations import Concurrency, Effect, Outcome, Replay

pytestmark = pytest.mark.anyio

KINDS = ["bubblewrap", "landlock"]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_prompt_is_answered_through_write_stdin(
    kind: str, workspace: Path, tmp_path: Path
) -> None:
    async with exec_runtime(workspace, tmp_path / "z.db", kind) as rt:
        s = rt.open_session()
        # A long yield: only the waiting-for-input verdict can end the call with this text.
        asked = await rt.call(s, "exec_command", {"command": PROMPT, "yield_ms": 30_000})
        assert asked.outcome is Outcome.OK, asked.output
        first, _, rest = asked.output.partition("\n")
        assert first == "[process 1 is waiting for input: type with write_stdin session=1]"
        assert rest == "Name? "
        assert asked.data is not None and asked.data["sandbox"] == kind
        assert asked.data["waiting_for_input"] is True and asked.data["state"] == "running"
        assert asked.declaration == rt.registry.get("exec_command").declaration  # type: ignore[union-attr]
        assert not (workspace / "answer.txt").exists()

        answered = await rt.call(
            s, "write_stdin", {"session": 1, "chars": "Ada Lovelace\n", "yield_ms": 30_000}
        )
        assert answered.outcome is Outcome.OK, answered.output
        assert answered.output.splitlines() == [
            "[process 1 exited with code 0]",
            "Ada Lovelace",  # the terminal's echo of what was typed
            "Hello, Ada Lovelace",
        ]
        assert answered.data is not None and answered.data["exit_code"] == 0
    assert (workspace / "answer.txt").read_text() == "Ada Lovelace\n"
    for result in (asked, answered):
        decl = result.declaration
        assert decl is not None
        assert (decl.effect, decl.replay, decl.concurrency) == (
            Effect.SIDE_EFFECTING,
            Replay.NEVER,
            Concurrency.EXCLUSIVE,
        )


async def test_a_repl_waiting_in_select_is_seen_waiting(workspace: Path, tmp_path: Path) -> None:
    # Python's REPL reads through readline, which waits in select(2), not read(2).
    async with exec_runtime(workspace, tmp_path / "z.db") as rt:
        s = rt.open_session()
        started = await rt.call(s, "exec_command", {"command": "python3 -q", "yield_ms": 30_000})
        assert started.output.startswith("[process 1 is waiting for input")
        assert started.output.endswith(">>> ")
        answer = await rt.call(
            s, "write_stdin", {"session": 1, "chars": "print(6 * 7)\n", "yield_ms": 30_000}
        )
        assert answer.output.startswith("[process 1 is waiting for input")
        assert "\n42\n>>> " in answer.output


@pytest.mark.parametrize("kind", KINDS)
async def test_ctrl_c_interrupts_the_foreground_job(
    kind: str, workspace: Path, tmp_path: Path
) -> None:
    marker = new_marker()
    async with exec_runtime(workspace, tmp_path / "z.db", kind) as rt:
        s = rt.open_session()
        started = await rt.call(
            s, "exec_command", {"command": f"{sleeper(marker)}; echo after", "yield_ms": 100}
        )
        assert started.output.startswith("[process 1 is still running")
        assert appeared(marker)
        # Ctrl-C reaches the foreground group (the sleep and the shell), as at a keyboard.
        stopped = await rt.call(
            s, "write_stdin", {"session": 1, "chars": "\u0003", "yield_ms": 30_000}
        )
        assert stopped.data is not None and stopped.data["state"] == "exited"
        # bash reports its interrupted child as 130 (128 + SIGINT), or dies of SIGINT itself.
        assert stopped.data["exit_code"] == 130 or stopped.data["signal"] == "SIGINT"
        assert "after" not in stopped.output
        assert gone(marker)


async def test_exec_kill_ends_the_whole_tree(workspace: Path, tmp_path: Path) -> None:
    marker = new_marker()
    async with exec_runtime(workspace, tmp_path / "z.db") as rt:
        s = rt.open_session()
        command = f"setsid {sleeper(marker)} & read -p 'go? ' x"
        started = await rt.call(s, "exec_command", {"command": command, "yield_ms": 30_000})
        assert started.output.startswith("[process 1 is waiting for input")
        assert appeared(marker)
        killed = await rt.call(s, "exec_kill", {"session": 1})
        assert killed.outcome is Outcome.OK
        assert killed.output.startswith("[process 1 was killed]")
        assert killed.declaration is not None
        assert killed.declaration.effect is Effect.SIDE_EFFECTING
        assert killed.declaration.replay is Replay.NEVER
        assert gone(marker)
        assert started.data is not None and not alive(started.data["pid"])
        again = await rt.call(s, "write_stdin", {"session": 1, "chars": "y\n"})
        assert again.outcome is Outcome.ERROR
        assert "process 1 has ended (killed by exec_kill)" in again.output


async def test_the_deadline_kills_the_process(workspace: Path, tmp_path: Path) -> None:
    marker = new_marker()
    async with exec_runtime(workspace, tmp_path / "z.db") as rt:
        s = rt.open_session()
        result = await rt.call(
            s, "exec_command", {"command": sleeper(marker), "timeout": 1, "yield_ms": 30_000}
        )
        assert result.outcome is Outcome.UNCERTAIN
        assert "killed at its deadline of 1 s" in result.output
        assert gone(marker)


async def test_the_end_of_the_runtime_kills_its_processes(workspace: Path, tmp_path: Path) -> None:
    marker = new_marker()
    async with exec_runtime(workspace, tmp_path / "z.db") as rt:
        s = rt.open_session()
        started = await rt.call(s, "exec_command", {"command": sleeper(marker), "yield_ms": 0})
        assert started.output.startswith("[process 1 is still running")
        assert appeared(marker)
        pid = started.data["pid"] if started.data else 0
        assert alive(pid)
    assert not alive(pid)
    assert gone(marker)
    rows = rt.store.query("SELECT state, detail FROM exec_processes WHERE number = 1")
    assert rows == [("killed", "killed when the runtime ended")]


async def test_without_a_terminal_stdin_is_a_pipe(workspace: Path, tmp_path: Path) -> None:
    async with exec_runtime(workspace, tmp_path / "z.db") as rt:
        s = rt.open_session()
        command = "test -t 0 || echo 'no terminal'; read a; read b; echo \"got $a $b\""
        first = await rt.call(
            s, "exec_command", {"command": command, "tty": False, "yield_ms": 30_000}
        )
        assert first.output.splitlines() == [
            "[process 1 is waiting for input: type with write_stdin session=1]",
            "no terminal",
        ]
        second = await rt.call(s, "write_stdin", {"session": 1, "chars": "x\n", "yield_ms": 30_000})
        assert second.output.startswith("[process 1 is waiting for input")
        assert "(no new output)" in second.output  # no terminal: nothing is echoed
        third = await rt.call(s, "write_stdin", {"session": 1, "chars": "y\n", "yield_ms": 30_000})
        assert third.output == "[process 1 exited with code 0]\ngot x y"


async def test_output_is_plain_text_within_the_limits(workspace: Path, tmp_path: Path) -> None:
    rt = exec_runtime(
        workspace, tmp_path / "z.db", tool_output={"max_bytes": 4096, "max_lines": 100}
    )
    command = (
        "printf '\\033]0;title\\007'; for i in $(seq 1 3000); do "
        "printf '\\033[1;32mline %s\\033[0m\\n' $i; done"
    )
    async with rt:
        s = rt.open_session()
        result = await rt.call(s, "exec_command", {"command": command, "yield_ms": 30_000})
    assert result.output.startswith("[process 1 exited with code 0]\nline 1\n")
    assert result.output.rstrip().endswith("line 3000")
    assert "\x1b" not in result.output and "title" not in result.output
    assert len(result.output.encode()) <= 4096
    assert result.artifact is not None
    saved = _bytes(result.artifact)
    assert b"line 1500\n" in saved and b"\x1b" not in saved
    transcript = result.data["transcript"] if result.data else ""
    assert b"\x1b[1;32mline 1500\x1b[0m" in _bytes(transcript)  # raw bytes kept


def _bytes(path: str) -> bytes:
    return Path(path).read_bytes()


async def test_unread_output_past_the_cap_keeps_both_ends(workspace: Path, tmp_path: Path) -> None:
    # 1.6 MiB printed before anyone reads: only PENDING_CAP is held, the transcript keeps all.
    command = "python3 -c \"import sys; [print(f'row {i:07d}', 'x' * 100) for i in range(15000)]\""
    async with exec_runtime(workspace, tmp_path / "z.db") as rt:
        s = rt.open_session()
        result = await rt.call(s, "exec_command", {"command": command, "yield_ms": 30_000})
    assert result.output.startswith("[process 1 exited with code 0]\n[")
    assert "of earlier output were dropped from the middle" in result.output
    assert "row 0000000 " in result.output and "row 0014999 " in result.output
    assert result.data is not None and result.data["dropped_bytes"] > 0
    transcript = _bytes(result.data["transcript"])
    assert b"row 0007500 " in transcript and transcript.count(b"\n") == 15000
