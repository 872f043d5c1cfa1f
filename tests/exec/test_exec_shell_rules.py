"""Command rules written for ``shell`` hold for ``exec_command`` too.

Both run a command line through a shell, so a user's ``shell`` deny rule
(``rm *``) must not be walked around by starting the same command on a
terminal. Judged by the file still on disk and the blocked row.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from exec_harness import exec_runtime

from zuno.core.declarations import BlockKind, Outcome

pytestmark = pytest.mark.anyio

DENY_RM = {"rules": [{"tool": "shell", "pattern": "rm *", "action": "deny"}]}


async def test_a_shell_deny_rule_refuses_the_same_command_on_a_terminal(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "keep.txt").write_text("precious\n")
    async with exec_runtime(workspace, tmp_path / "z.db", permission=DENY_RM) as rt:
        s = rt.open_session()
        for command in ("rm -f keep.txt", "true && rm -f keep.txt"):
            result = await rt.call(s, "exec_command", {"command": command, "yield_ms": 2000})
            assert result.outcome is Outcome.BLOCKED, result.output
            assert result.block_kind is BlockKind.DENIED
        allowed = await rt.call(s, "exec_command", {"command": "echo fine", "yield_ms": 5000})
        assert allowed.outcome is Outcome.OK, allowed.output
    assert (workspace / "keep.txt").read_text() == "precious\n"


@pytest.mark.parametrize("shell", ["bash --norc -i", "sh", "env bash"])
async def test_no_interactive_shell_to_type_a_denied_command_into(
    shell: str, workspace: Path, tmp_path: Path
) -> None:
    """What is typed into a terminal is not checked by rules, so under a deny rule
    a shell that would read its commands from the terminal is not started at all."""
    (workspace / "keep.txt").write_text("precious\n")
    async with exec_runtime(workspace, tmp_path / "z.db", permission=DENY_RM) as rt:
        s = rt.open_session()
        started = await rt.call(s, "exec_command", {"command": shell, "yield_ms": 2000})
        assert started.outcome is Outcome.BLOCKED, started.output
        assert started.block_kind is BlockKind.DENIED
        typed = await rt.call(s, "write_stdin", {"session": 1, "chars": "rm -f keep.txt\n"})
        assert typed.outcome is not Outcome.OK
    assert (workspace / "keep.txt").read_text() == "precious\n"
