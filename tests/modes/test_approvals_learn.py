"""Approvals that learn, through the Python API: fewer questions, and answers that carry more.

- a call changing only the session's own plan, todos or goal is never asked about;
- typing into an interactive process asks once per process, unless a deny rule matches
  what is typed;
- "no, and tell the model why": the person's words reach the model in the denial;
- "always" may keep a wider rule: later calls it matches run unasked, others still ask;
- the rule offered, how it is saved, and how many past calls it would have matched.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from zuno.cli.approvals import past_matches
from zuno.config.loading import Config, ConfigError, load_config
from zuno.config.permission import PermissionRule
from zuno.core.declarations import BlockKind, Outcome
from zuno.dispatch.dispatcher import CallRequest
from zuno.policy.approvals import ApprovalAnswer, ApprovalDecision, ApprovalRequest
from zuno.policy.learned_rules import command_prefix, folder_glob, save_rule, suggest_rule
from zuno.session.runtime import Runtime

sys.path.insert(0, str(Path(__file__).parents[1] / "exec"))

from exec_harness import exec_config

pytestmark = pytest.mark.anyio


class Answering:
    """An approver that writes down every request and gives the next scripted answer."""

    name = "answering"

    def __init__(self, *answers: ApprovalDecision | ApprovalAnswer) -> None:
        self.answers = list(answers)
        self.asked: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision | ApprovalAnswer:
        self.asked.append(request)
        return self.answers.pop(0) if self.answers else ApprovalDecision.DENY


def _runtime(workspace: Path, tmp_path: Path, approver: Answering, **config: Any) -> Runtime:
    return Runtime(
        workspace,
        config=Config.model_validate(config),
        db_path=tmp_path / "z.db",
        approver=approver,
    )


@pytest.mark.parametrize("mode", ["strict", "accept-edits"])
async def test_own_state_updates_are_never_asked_about(
    workspace: Path, tmp_path: Path, mode: str
) -> None:
    approver = Answering()  # would deny anything it is asked
    rt = _runtime(workspace, tmp_path, approver)
    try:
        s = rt.open_session(mode=mode)  # type: ignore[arg-type]
        results = await rt.dispatch(
            s,
            [
                CallRequest("todo_update", {"todos": [{"id": "t1", "content": "fix the test"}]}),
                CallRequest("plan_update", {"plan": "1. fix it"}),
                CallRequest("goal_update", {"objective": "a green suite"}),
            ],
        )
        assert [r.outcome for r in results] == [Outcome.OK] * 3, [r.output for r in results]
        assert approver.asked == []
        assert "fix the test" in (await rt.call(s, "todo_get", {})).output
    finally:
        rt.close()


async def test_a_deny_rule_still_refuses_an_own_state_update(
    workspace: Path, tmp_path: Path
) -> None:
    approver = Answering(ApprovalDecision.APPROVE_ONCE)
    rules = [{"tool": "todo_update", "action": "deny"}]
    rt = _runtime(workspace, tmp_path, approver, permission={"rules": rules})
    try:
        s = rt.open_session()
        (result,) = await rt.dispatch(
            s, [CallRequest("todo_update", {"todos": [{"id": "t1", "content": "x"}]})]
        )
        assert result.block_kind is BlockKind.DENIED
        assert approver.asked == []
    finally:
        rt.close()


async def test_typing_into_a_process_asks_once_per_process(workspace: Path, tmp_path: Path) -> None:
    approver = Answering(*[ApprovalDecision.APPROVE_ONCE] * 4)
    rt = _runtime(workspace, tmp_path, approver, **exec_config())
    try:
        async with rt:
            s = rt.open_session()
            for _ in range(2):
                (started,) = await rt.dispatch(
                    s, [CallRequest("exec_command", {"command": "cat", "yield_ms": 200})]
                )
                assert started.outcome is Outcome.OK, started.output
            typed: list[str] = []
            for number, chars in [(1, "one\n"), (1, "two\n"), (1, "three\n"), (2, "four\n")]:
                arguments = {"session": number, "chars": chars, "yield_ms": 300}
                (result,) = await rt.dispatch(s, [CallRequest("write_stdin", arguments)])
                assert result.outcome is Outcome.OK, result.output
                typed.append(result.output)
            assert "three" in typed[2] and "four" in typed[3]
        # exec_command twice, then the first keystrokes into each process: four questions.
        assert [r.tool for r in approver.asked] == [
            "exec_command",
            "exec_command",
            "write_stdin",
            "write_stdin",
        ]
        assert "typing into process 1" in approver.asked[2].covers
    finally:
        rt.close()


async def test_a_deny_rule_refuses_what_is_typed_into_an_approved_process(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "keep.txt").write_text("kept\n")
    approver = Answering(*[ApprovalDecision.APPROVE_SESSION] * 3)
    # A shell deny rule would refuse starting bash itself (its input is opaque to rules).
    rules = [{"tool": "write_stdin", "pattern": "rm", "action": "deny"}]
    config = exec_config(permission={"rules": rules})
    rt = _runtime(workspace, tmp_path, approver, **config)
    try:
        async with rt:
            s = rt.open_session()
            await rt.dispatch(s, [CallRequest("exec_command", {"command": "bash", "tty": False})])
            first, refused = await rt.dispatch(
                s,
                [
                    CallRequest("write_stdin", {"session": 1, "chars": "echo hi\n"}),
                    CallRequest("write_stdin", {"session": 1, "chars": "rm keep.txt\n"}),
                ],
            )
        assert first.outcome is Outcome.OK, first.output
        assert refused.block_kind is BlockKind.DENIED and "rm" in refused.output
        assert (workspace / "keep.txt").exists()
        assert [r.tool for r in approver.asked] == ["exec_command", "write_stdin"]
    finally:
        rt.close()


async def test_a_deny_rule_for_shell_commands_holds_for_a_command_typed_into_a_process(
    workspace: Path, tmp_path: Path
) -> None:
    approver = Answering(*[ApprovalDecision.APPROVE_SESSION] * 3)
    rules = [{"tool": "shell", "pattern": "rm", "action": "deny"}]
    rt = _runtime(workspace, tmp_path, approver, **exec_config(permission={"rules": rules}))
    try:
        async with rt:
            s = rt.open_session()
            (cat,) = await rt.dispatch(
                s, [CallRequest("exec_command", {"command": "cat", "yield_ms": 200})]
            )
            assert cat.outcome is Outcome.OK, cat.output
            typed, refused = await rt.dispatch(
                s,
                [
                    CallRequest("write_stdin", {"session": 1, "chars": "ls\n"}),
                    CallRequest("write_stdin", {"session": 1, "chars": "rm -rf src\n"}),
                ],
            )
        assert typed.outcome is Outcome.OK
        assert refused.block_kind is BlockKind.DENIED
    finally:
        rt.close()


async def test_no_and_tell_the_model_why_reaches_the_model_in_the_denial(
    workspace: Path, tmp_path: Path
) -> None:
    words = "use uv, not pip, in this project"
    approver = Answering(ApprovalAnswer(ApprovalDecision.DENY, message=words))
    rt = _runtime(workspace, tmp_path, approver)
    try:
        s = rt.open_session()
        (result,) = await rt.dispatch(s, [CallRequest("shell", {"command": "pip install x"})])
        assert result.block_kind is BlockKind.DENIED
        assert words in result.output and "the user denied it" in result.output
        decided = [e for e in rt.store.events(s.session_id) if e.kind == "approval.decided"]
        assert decided[-1].data["message"] == words
    finally:
        rt.close()


async def test_a_rule_chosen_at_always_lets_later_matching_calls_run_unasked(
    workspace: Path, tmp_path: Path
) -> None:
    rule = PermissionRule(tool="shell", pattern="echo", action="allow")
    approver = Answering(
        ApprovalAnswer(ApprovalDecision.APPROVE_SESSION, rule=rule), ApprovalDecision.DENY
    )
    rt = _runtime(workspace, tmp_path, approver)
    try:
        s = rt.open_session()
        results = await rt.dispatch(
            s,
            [
                CallRequest("shell", {"command": "echo one"}),
                CallRequest("shell", {"command": "echo two"}),
                CallRequest("shell", {"command": "touch other"}),
            ],
        )
        assert [r.outcome for r in results] == [Outcome.OK, Outcome.OK, Outcome.BLOCKED]
        assert [r.arguments["command"] for r in approver.asked] == ["echo one", "touch other"]
    finally:
        rt.close()


def test_the_rule_offered_is_one_step_wider_than_the_call() -> None:
    assert command_prefix("git status --short") == "git status"
    assert command_prefix("ls -la") == "ls"
    assert command_prefix("pytest tests/test_x.py") == "pytest"
    assert command_prefix("ls | wc -l") is None  # not one plain command: no rule
    assert folder_glob(["src/pkg/a.py", "src/pkg/sub/b.py"]) == "src/pkg/**"
    assert folder_glob(["notes.md"]) == "*.md"
    assert folder_glob(["Makefile"]) is None
    assert folder_glob(["../outside.txt"]) is None
    shell = suggest_rule("shell", {"command": "npm test -- --watch=false"}, [])
    assert shell == PermissionRule(tool="shell", pattern="npm test", action="allow")
    edit = suggest_rule("edit", {"path": "src/a.py"}, ["src/a.py"])
    assert edit == PermissionRule(tool="edit", pattern="src/**", action="allow")
    assert suggest_rule("task", {"prompt": "x"}, []) is None


def test_a_saved_rule_is_added_to_the_users_file_and_read_back(tmp_path: Path) -> None:
    user = tmp_path / "config" / "zuno.json"
    user.parent.mkdir()
    user.write_text(json.dumps({"model": "openai:m", "permission": {"mode": "strict"}}))
    rule = PermissionRule(tool="shell", pattern="git status", action="allow")
    save_rule(rule, user)
    save_rule(rule, user)  # twice: kept once
    config = load_config(tmp_path, user_file=user)
    assert config.model == "openai:m" and config.permission.mode == "strict"
    assert config.permission.rules == [rule]
    user.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not a JSON object"):
        save_rule(rule, user)


async def test_past_matches_count_this_folders_calls_of_the_rules_tool(
    workspace: Path, tmp_path: Path
) -> None:
    approver = Answering(*[ApprovalDecision.APPROVE_ONCE] * 5)
    rt = _runtime(workspace, tmp_path, approver)
    try:
        s = rt.open_session()
        await rt.dispatch(
            s,
            [
                CallRequest("shell", {"command": "git status"}),
                CallRequest("shell", {"command": "git status --short"}),
                CallRequest("shell", {"command": "git log"}),
                CallRequest("write", {"path": "docs/a.md", "content": "a\n"}),
                CallRequest("write", {"path": "b.md", "content": "b\n"}),
            ],
        )
        git = PermissionRule(tool="shell", pattern="git status", action="allow")
        assert past_matches(rt, git) == (2, 3)
        docs = PermissionRule(tool="write", pattern="docs/**", action="allow")
        assert past_matches(rt, docs) == (1, 2)
    finally:
        rt.close()
