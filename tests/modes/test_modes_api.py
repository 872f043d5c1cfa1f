"""Permission modes through the Python API: what each mode runs, asks and refuses.

Judged by what happened on disk and in the store (the call's row, the session's
options) and by whether the approver was asked at all, never by the tool's words alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from zuno.config.loading import Config, ConfigError, load_config
from zuno.config.trust import trust
from zuno.core.declarations import BlockKind, Outcome
from zuno.dispatch.dispatcher import CallRequest
from zuno.dispatch.session_state import SessionState
from zuno.policy.approvals import ApprovalDecision, ApprovalRequest
from zuno.policy.hooks import HookCall
from zuno.policy.modes import stored_mode
from zuno.policy.permissions import MODES
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


class Recording:
    """An approver that writes down every request and answers ``decision``."""

    name = "recording"

    def __init__(self, decision: ApprovalDecision = ApprovalDecision.DENY) -> None:
        self.decision = decision
        self.asked: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.asked.append(request)
        return self.decision

    @property
    def tools(self) -> list[str]:
        return [r.tool for r in self.asked]


def _runtime(workspace: Path, tmp_path: Path, approver: Recording, **config: Any) -> Runtime:
    return Runtime(
        workspace,
        config=Config.model_validate(config) if config else None,
        db_path=tmp_path / "z.db",
        approver=approver,
    )


def _row(rt: Runtime, session: SessionState, call_id: str) -> dict[str, Any]:
    (row,) = [c for c in rt.store.calls(session.session_id) if c.call_id == call_id]
    return row.as_dict()


async def test_plan_mode_refuses_a_write_and_a_shell_call_before_anyone_is_asked(
    workspace: Path, tmp_path: Path
) -> None:
    approver = Recording(ApprovalDecision.APPROVE_ONCE)  # would approve anything it saw
    rt = _runtime(workspace, tmp_path, approver)
    try:
        s = rt.open_session(mode="plan")
        write, shell = await rt.dispatch(
            s,
            [
                CallRequest("write", {"path": "plan.txt", "content": "x\n"}),
                CallRequest("shell", {"command": "touch made-by-shell"}),
            ],
        )
        for result in (write, shell):
            assert result.outcome is Outcome.BLOCKED
            assert result.block_kind is BlockKind.DENIED
            assert "plan mode" in result.output and "switch the" in result.output
            row = _row(rt, s, result.call_id)
            assert (row["outcome"], row["block_kind"], row["mode"]) == (
                "blocked",
                "denied",
                "plan",
            )
        assert approver.asked == []
        assert os.listdir(workspace) == []
    finally:
        rt.close()


async def test_plan_mode_runs_reads_and_plan_updates_unasked(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "notes.md").write_text("the notes\n")
    approver = Recording()  # denies whatever it is asked
    rt = _runtime(workspace, tmp_path, approver)
    try:
        s = rt.open_session(mode="plan")
        read, update, todo, grep = await rt.dispatch(
            s,
            [
                CallRequest("read", {"path": "notes.md"}),
                CallRequest("plan_update", {"plan": "1. change notes.md"}),
                CallRequest("todo_update", {"todos": [{"id": "t1", "content": "do it"}]}),
                CallRequest("grep", {"pattern": "notes"}),
            ],
        )
        assert read.outcome is Outcome.OK and "the notes" in read.output
        assert update.outcome is Outcome.OK, update.output
        assert todo.outcome is Outcome.OK, todo.output
        assert grep.outcome is Outcome.OK
        got = await rt.call(s, "plan_get", {})
        assert "1. change notes.md" in got.output
        assert approver.asked == []
        assert {_row(rt, s, r.call_id)["mode"] for r in (read, update, todo, grep)} == {"plan"}
    finally:
        rt.close()


async def test_plan_mode_is_stronger_than_an_allow_rule_and_deny_rules_still_deny(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "secret.md").write_text("s\n")
    approver = Recording(ApprovalDecision.APPROVE_ONCE)
    rules = [
        {"tool": "write", "action": "allow"},
        {"tool": "shell", "pattern": "touch", "action": "allow"},
        {"tool": "read", "pattern": "secret.md", "action": "deny"},
    ]
    rt = _runtime(workspace, tmp_path, approver, permission={"mode": "plan", "rules": rules})
    try:
        s = rt.open_session()
        assert s.permissions.mode == "plan"  # from the configuration
        write, shell, read = await rt.dispatch(
            s,
            [
                CallRequest("write", {"path": "a.txt", "content": "x"}),
                CallRequest("shell", {"command": "touch b.txt"}),
                CallRequest("read", {"path": "secret.md"}),
            ],
        )
        assert write.block_kind is BlockKind.DENIED and "plan mode" in write.output
        assert shell.block_kind is BlockKind.DENIED and "plan mode" in shell.output
        assert read.block_kind is BlockKind.DENIED and "rule 'deny read'" in read.output
        assert not (workspace / "a.txt").exists() and not (workspace / "b.txt").exists()
        assert approver.asked == []
    finally:
        rt.close()


async def test_accept_edits_writes_inside_unasked_but_asks_for_commands_and_control_files(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "old.txt").write_text("one\n")
    approver = Recording()  # no one approves: what is asked is denied
    rt = _runtime(workspace, tmp_path, approver)
    try:
        s = rt.open_session(mode="accept-edits")
        # Read first: an edit of a file this session never read is refused (file_versions).
        assert (await rt.call(s, "read", {"path": "old.txt"})).outcome is Outcome.OK
        patch = "*** Begin Patch\n*** Update File: old.txt\n@@\n-one\n+two\n*** End Patch\n"
        write, patched, shell, control, gitfile = await rt.dispatch(
            s,
            [
                CallRequest("write", {"path": "sub/new.txt", "content": "new\n"}),
                CallRequest("apply_patch", {"patch": patch}),
                CallRequest("shell", {"command": "touch by-shell"}),
                CallRequest("write", {"path": "zuno.json", "content": "{}"}),
                CallRequest("write", {"path": ".git/hooks/pre-commit", "content": "x"}),
            ],
        )
        assert write.outcome is Outcome.OK, write.output
        assert patched.outcome is Outcome.OK, patched.output
        assert (workspace / "sub/new.txt").read_text() == "new\n"
        assert (workspace / "old.txt").read_text() == "two\n"
        for refused in (shell, control, gitfile):
            assert refused.block_kind is BlockKind.DENIED, refused.output
            assert "needed approval" in refused.output
        assert not (workspace / "by-shell").exists()
        assert not (workspace / "zuno.json").exists() and not (workspace / ".git").exists()
        assert approver.tools == ["shell", "write", "write"]
        assert [r.arguments.get("path") for r in approver.asked[1:]] == [
            "zuno.json",
            ".git/hooks/pre-commit",
        ]
        assert {_row(rt, s, r.call_id)["mode"] for r in (write, patched, shell)} == {"accept-edits"}
    finally:
        rt.close()


async def test_accept_edits_still_honours_ask_rules_and_writes_outside_are_refused(
    workspace: Path, tmp_path: Path
) -> None:
    approver = Recording()
    rules = [{"tool": "write", "pattern": "docs/**", "action": "ask"}]
    rt = _runtime(workspace, tmp_path, approver, permission={"rules": rules})
    outside = tmp_path / "outside.txt"
    try:
        s = rt.open_session(mode="accept-edits")
        asked, elsewhere, plain = await rt.dispatch(
            s,
            [
                CallRequest("write", {"path": "docs/a.md", "content": "x"}),
                CallRequest("write", {"path": str(outside), "content": "x"}),
                CallRequest("write", {"path": "b.md", "content": "x"}),
            ],
        )
        assert asked.block_kind is BlockKind.DENIED and "rule 'ask write'" in asked.output
        assert elsewhere.outcome is not Outcome.OK and not outside.exists()
        assert plain.outcome is Outcome.OK and (workspace / "b.md").exists()
        assert not (workspace / "docs").exists()
        assert "write" in approver.tools
        assert all(r.arguments.get("path") != "b.md" for r in approver.asked)
    finally:
        rt.close()


async def test_accept_edits_does_not_follow_a_symlink_out_of_the_workspace(
    workspace: Path, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (workspace / "link").symlink_to(target)
    approver = Recording()
    rt = _runtime(workspace, tmp_path, approver)
    try:
        s = rt.open_session(mode="accept-edits")
        result = await rt.call(s, "write", {"path": "link/x.txt", "content": "x"})
        assert result.outcome is not Outcome.OK
        assert not (target / "x.txt").exists()
    finally:
        rt.close()


async def test_strict_and_permissive_behave_as_before(workspace: Path, tmp_path: Path) -> None:
    approver = Recording()
    rt = _runtime(workspace, tmp_path, approver)
    try:
        strict = rt.open_session()
        assert strict.permissions.mode == "strict"
        refused = await rt.call(strict, "write", {"path": "s.txt", "content": "x"})
        assert refused.block_kind is BlockKind.DENIED and approver.tools == ["write"]
        assert _row(rt, strict, refused.call_id)["mode"] == "strict"
        loose = rt.open_session(mode="permissive")
        ok = await rt.call(loose, "shell", {"command": "touch p.txt"})
        assert ok.outcome is Outcome.OK and (workspace / "p.txt").exists()
        assert approver.tools == ["write"]
        assert _row(rt, loose, ok.call_id)["mode"] == "permissive"
    finally:
        rt.close()


async def test_each_row_records_the_mode_it_ran_in_and_set_mode_switches(
    workspace: Path, tmp_path: Path
) -> None:
    approver = Recording(ApprovalDecision.APPROVE_ONCE)
    rt = _runtime(workspace, tmp_path, approver)
    try:
        s = rt.open_session()
        first = await rt.call(s, "write", {"path": "one.txt", "content": "1"})
        rt.set_mode(s, "plan")
        second = await rt.call(s, "write", {"path": "two.txt", "content": "2"})
        rt.set_mode(s, "accept-edits")
        third = await rt.call(s, "write", {"path": "three.txt", "content": "3"})
        assert [first.outcome, second.outcome, third.outcome] == [
            Outcome.OK,
            Outcome.BLOCKED,
            Outcome.OK,
        ]
        modes = [_row(rt, s, r.call_id)["mode"] for r in (first, second, third)]
        assert modes == ["strict", "plan", "accept-edits"]
        assert approver.tools == ["write"]  # only the strict one was asked
        assert not (workspace / "two.txt").exists()
        assert stored_mode(rt.store, s.session_id) == "accept-edits"
        switches = [e.data for e in rt.store.events(s.session_id) if e.kind == "session.mode"]
        assert switches == [
            {"mode": "plan", "was": "strict"},
            {"mode": "accept-edits", "was": "plan"},
        ]
        with pytest.raises(ValueError, match="the modes are plan, accept-edits"):
            rt.set_mode(s, "yolo")  # type: ignore[arg-type]
    finally:
        rt.close()


async def test_a_resumed_session_keeps_its_mode_unless_another_is_given(
    workspace: Path, tmp_path: Path
) -> None:
    rt = _runtime(workspace, tmp_path, Recording())
    s = rt.open_session(mode="plan")
    sid = s.session_id
    rt.close()
    rt = _runtime(workspace, tmp_path, Recording())
    try:
        again = rt.open_session(sid)
        assert again.permissions.mode == "plan"
        result = await rt.call(again, "write", {"path": "x.txt", "content": "x"})
        assert result.block_kind is BlockKind.DENIED and "plan mode" in result.output
    finally:
        rt.close()
    rt = _runtime(workspace, tmp_path, Recording())
    try:
        switched = rt.open_session(sid, mode="accept-edits")
        assert switched.permissions.mode == "accept-edits"
        assert (await rt.call(switched, "write", {"path": "x.txt", "content": "x"})).outcome is (
            Outcome.OK
        )
    finally:
        rt.close()
    rt = _runtime(workspace, tmp_path, Recording())
    try:
        assert rt.open_session(sid).permissions.mode == "accept-edits"
        # A session no one chose a mode for follows the configuration.
        assert rt.open_session().permissions.mode == "strict"
    finally:
        rt.close()


async def test_approving_with_accept_edits_switches_the_session(
    workspace: Path, tmp_path: Path
) -> None:
    approver = Recording(ApprovalDecision.ACCEPT_EDITS)
    rt = _runtime(workspace, tmp_path, approver)
    try:
        s = rt.open_session()
        first = await rt.call(s, "write", {"path": "a.txt", "content": "a"})
        second = await rt.call(s, "write", {"path": "b.txt", "content": "b"})
        assert first.outcome is Outcome.OK and second.outcome is Outcome.OK
        assert approver.tools == ["write"] and approver.asked[0].offers_accept_edits
        assert [_row(rt, s, r.call_id)["mode"] for r in (first, second)] == [
            "strict",
            "accept-edits",
        ]
        assert stored_mode(rt.store, s.session_id) == "accept-edits"
        approver.decision = ApprovalDecision.DENY
        shell = await rt.call(s, "shell", {"command": "touch c.txt"})
        assert shell.block_kind is BlockKind.DENIED and not (workspace / "c.txt").exists()
        assert approver.tools == ["write", "shell"]
    finally:
        rt.close()


def test_configuration_accepts_the_four_modes_and_refuses_others(workspace: Path) -> None:
    for mode in MODES:
        (workspace / "zuno.json").write_text(json.dumps({"permission": {"mode": mode}}))
        trust(workspace)
        assert load_config(workspace).permission.mode == mode
    (workspace / "zuno.json").write_text(json.dumps({"permission": {"mode": "yolo"}}))
    with pytest.raises(ConfigError):
        load_config(workspace)


def test_an_untrusted_workspace_may_choose_plan_but_not_accept_edits(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "zuno.json").write_text(json.dumps({"permission": {"mode": "plan"}}))
    assert load_config(workspace).permission.mode == "plan"
    (workspace / "zuno.json").write_text(json.dumps({"permission": {"mode": "accept-edits"}}))
    assert load_config(workspace).permission.mode == "strict"


async def test_plan_mode_refuses_before_hooks_and_a_hook_cannot_ask_past_it(
    workspace: Path, tmp_path: Path
) -> None:
    (workspace / "notes.md").write_text("n\n")
    seen: list[str] = []

    def before(call: HookCall) -> dict[str, Any]:
        seen.append(call.tool)
        return {"decision": "ask", "reason": "the hook wants a person to look"}

    approver = Recording(ApprovalDecision.APPROVE_ONCE)
    rt = Runtime(workspace, db_path=tmp_path / "z.db", approver=approver, before_hooks=[before])
    try:
        s = rt.open_session(mode="plan")
        write, read = await rt.dispatch(
            s,
            [
                CallRequest("write", {"path": "x.txt", "content": "x"}),
                CallRequest("read", {"path": "notes.md"}),
            ],
        )
        assert write.block_kind is BlockKind.DENIED and "plan mode" in write.output
        assert read.outcome is Outcome.OK
        assert seen == ["read"]  # the refused write never reached the hook
        assert approver.tools == ["read"]  # the hook's ask reached the approver for the read
        assert not (workspace / "x.txt").exists()
    finally:
        rt.close()


async def test_a_hook_rewriting_an_admitted_call_into_a_side_effect_is_refused_in_plan_mode(
    workspace: Path, tmp_path: Path
) -> None:
    def before(call: HookCall) -> dict[str, Any]:
        # bg list is read-only and admitted; bg cancel is side-effecting.
        return {"decision": "allow", "arguments": {"action": "cancel", "job_id": "job_x"}}

    approver = Recording(ApprovalDecision.APPROVE_ONCE)
    rt = Runtime(workspace, db_path=tmp_path / "z.db", approver=approver, before_hooks=[before])
    try:
        s = rt.open_session(mode="plan")
        result = await rt.call(s, "bg", {"action": "list"})
        assert result.block_kind is BlockKind.DENIED and "plan mode" in result.output
        row = _row(rt, s, result.call_id)
        assert (row["block_kind"], row["mode"]) == ("denied", "plan")
        assert approver.asked == []
    finally:
        rt.close()
