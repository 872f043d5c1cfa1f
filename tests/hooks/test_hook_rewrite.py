"""Before hooks that rewrite or ask, through the Python API (``Runtime``).

A rewritten call goes through validation, classification and the permission
rules again: what the hook asked for is judged, not what the model asked for.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hook_scripts import hook_command

from zuno.config.loading import Config
from zuno.core.declarations import BlockKind, Outcome
from zuno.dispatch.dispatcher import CallRequest
from zuno.policy.approvals import ApprovalDecision, ApprovalRequest, ApproveAll, CallbackApprover
from zuno.policy.hooks import HookCall, HookDecision
from zuno.session.runtime import Runtime

sys.path.insert(0, str(Path(__file__).parents[1] / "core"))

from probe_tools import Recorder, probe_tools

pytestmark = pytest.mark.anyio

WRITE_RULES = [
    {"tool": "write", "pattern": "notes/**", "action": "allow"},
    {"tool": "write", "pattern": "secret/**", "action": "deny"},
]


def runtime(workspace: Path, tmp_path: Path, config: dict[str, Any], **kw: Any) -> Runtime:
    kw.setdefault("approver", ApproveAll())
    return Runtime(workspace, config=Config.model_validate(config), db_path=tmp_path / "z.db", **kw)


def kinds(rt: Runtime, session_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.events(session_id) if e.kind == kind]


async def test_a_rewrite_into_a_denied_path_is_blocked_by_the_rule(
    workspace: Path, tmp_path: Path
) -> None:
    """The must-have: the rules judge the rewritten call (here even with an approve-all user)."""

    def redirect(call: HookCall) -> HookDecision:
        return HookDecision(arguments={**call.arguments, "path": "secret/key.txt"}, reason="move")

    rt = runtime(
        workspace,
        tmp_path,
        {"permission": {"rules": WRITE_RULES}},
        before_hooks=[redirect],
    )
    s = rt.open_session()
    result = await rt.call(s, "write", {"path": "notes/a.txt", "content": "hello"})
    assert result.outcome is Outcome.BLOCKED and result.block_kind is BlockKind.DENIED
    assert "secret/**" in result.output and "before hook" in result.output
    assert not (workspace / "secret").exists() and not (workspace / "notes").exists()
    (row,) = rt.store.calls(s.session_id)
    assert json.loads(row.arguments)["path"] == "secret/key.txt"
    (rewrote,) = kinds(rt, s.session_id, "hook.rewrote")
    assert rewrote["before"]["path"] == "notes/a.txt"
    assert rewrote["after"]["path"] == "secret/key.txt"
    assert rewrote["reason"] == "move"


async def test_an_allowed_rewrite_runs_as_rewritten_and_the_model_is_told(
    workspace: Path, tmp_path: Path
) -> None:
    def redirect(call: HookCall) -> HookDecision:
        return HookDecision(arguments={**call.arguments, "path": "notes/b.txt"}, reason="b, not a")

    rt = runtime(
        workspace, tmp_path, {"permission": {"rules": WRITE_RULES}}, before_hooks=[redirect]
    )
    s = rt.open_session()
    result = await rt.call(s, "write", {"path": "notes/a.txt", "content": "hello"})
    assert result.outcome is Outcome.OK, result.output
    assert (workspace / "notes/b.txt").read_text() == "hello"
    assert not (workspace / "notes/a.txt").exists()
    # The model learns that what ran is not what it asked for, and what ran.
    assert "changed" in result.output and "notes/b.txt" in result.output
    assert "b, not a" in result.output
    (row,) = rt.store.calls(s.session_id)
    assert json.loads(row.arguments)["path"] == "notes/b.txt"
    assert row.outcome == "ok"
    (rewrote,) = kinds(rt, s.session_id, "hook.rewrote")
    assert (rewrote["before"]["path"], rewrote["after"]["path"]) == ("notes/a.txt", "notes/b.txt")


async def test_a_rewrite_that_fails_validation_is_invalid_arguments(
    workspace: Path, tmp_path: Path
) -> None:
    def break_it(call: HookCall) -> HookDecision:
        return HookDecision(arguments={"path": 5, "content": "x"})

    rt = runtime(
        workspace, tmp_path, {"permission": {"rules": WRITE_RULES}}, before_hooks=[break_it]
    )
    s = rt.open_session()
    result = await rt.call(s, "write", {"path": "notes/a.txt", "content": "hello"})
    assert result.outcome is Outcome.BLOCKED
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "before hook" in result.output and "path" in result.output
    assert not (workspace / "notes").exists()
    (row,) = rt.store.calls(s.session_id)
    assert row.block_kind == "invalid_arguments"
    assert json.loads(row.arguments) == {"path": 5, "content": "x"}


async def test_a_rewrite_is_classified_again(workspace: Path, tmp_path: Path) -> None:
    """A read-only call rewritten into a side-effecting one needs the approval it now needs."""
    rec = Recorder()
    seen: list[tuple[dict[str, Any], str]] = []

    def make_it_write(call: HookCall) -> HookDecision:
        return HookDecision(arguments={**call.arguments, "effect": "side_effecting"})

    def observe(call: HookCall) -> None:
        seen.append((dict(call.arguments), call.declaration["effect"]))

    denied: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> ApprovalDecision:
        denied.append(request)
        return ApprovalDecision.DENY

    rt = runtime(
        workspace,
        tmp_path,
        {},
        tools=probe_tools(rec),
        approver=CallbackApprover(approver),
        before_hooks=[make_it_write, observe],
    )
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "t"})
    # The next hook saw the rewritten call, classified again; each hook ran once.
    assert seen == [
        (
            {
                "tag": "t",
                "mode": "parallel",
                "effect": "side_effecting",
                "delay": 0.0,
                "fail": "none",
            },
            "side_effecting",
        )
    ]
    assert [r.declaration.effect.value for r in denied] == ["side_effecting"]
    assert result.block_kind is BlockKind.DENIED
    assert rec.events == [] and rec.effects == []
    (row,) = rt.store.calls(s.session_id)
    assert row.effect == "side_effecting"


async def test_hooks_after_a_rewrite_see_it_and_can_rewrite_again(
    workspace: Path, tmp_path: Path
) -> None:
    first = hook_command(
        tmp_path,
        "first",
        """
        call = json.load(sys.stdin)
        tag = call["arguments"]["tag"] + "-1"
        print(json.dumps({"arguments": {**call["arguments"], "tag": tag}}))
        """,
    )
    seen: list[str] = []

    def second(call: HookCall) -> dict[str, Any]:
        seen.append(call.arguments["tag"])
        return {
            "decision": "allow",
            "arguments": {**call.arguments, "tag": call.arguments["tag"] + "-2"},
        }

    rec = Recorder()
    rt = runtime(
        workspace,
        tmp_path,
        {"hooks": {"before": [first]}},
        tools=probe_tools(rec),
        before_hooks=[second],
    )
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "t"})
    assert result.outcome is Outcome.OK
    assert seen == ["t-1"]
    assert [tag for what, tag, _ in rec.events if what == "start"] == ["t-1-2"]
    rewrites = kinds(rt, s.session_id, "hook.rewrote")
    assert [(r["before"]["tag"], r["after"]["tag"]) for r in rewrites] == [
        ("t", "t-1"),
        ("t-1", "t-1-2"),
    ]


async def test_a_hook_that_returns_the_same_arguments_rewrites_nothing(
    workspace: Path, tmp_path: Path
) -> None:
    rec = Recorder()

    def echo(call: HookCall) -> HookDecision:
        return HookDecision(arguments=dict(call.arguments))

    rt = runtime(workspace, tmp_path, {}, tools=probe_tools(rec), before_hooks=[echo])
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "t"})
    assert result.outcome is Outcome.OK and "changed" not in result.output
    assert kinds(rt, s.session_id, "hook.rewrote") == []


async def test_ask_with_no_one_to_ask_is_denied(workspace: Path, tmp_path: Path) -> None:
    """A read-only call the rules allow is still put to the approver when a hook asks."""
    rec = Recorder()
    ask = hook_command(
        tmp_path, "ask", 'print(json.dumps({"decision": "ask", "reason": "a person should look"}))'
    )
    rt = runtime(
        workspace,
        tmp_path,
        {"hooks": {"before": [ask]}},
        tools=probe_tools(rec),
        approver=None,  # no terminal: the default approver denies
    )
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "t"})
    assert result.outcome is Outcome.BLOCKED and result.block_kind is BlockKind.DENIED
    assert "a person should look" in result.output
    assert rec.events == []
    (asked,) = kinds(rt, s.session_id, "approval.requested")
    assert "a person should look" in asked["reason"]


async def test_ask_goes_to_the_approver_and_a_deny_rule_still_denies(
    workspace: Path, tmp_path: Path
) -> None:
    rec = Recorder()
    requests: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        requests.append(request)
        return True

    def ask(call: HookCall) -> HookDecision:
        return HookDecision(ask=True, reason="look at " + call.arguments["tag"])

    config = {"permission": {"rules": [{"tool": "probe", "pattern": "bad", "action": "deny"}]}}
    rt = runtime(
        workspace,
        tmp_path,
        config,
        tools=probe_tools(rec),
        approver=CallbackApprover(approve),
        before_hooks=[ask],
    )
    s = rt.open_session()
    good, bad = await rt.dispatch(s, [CallRequest("probe", {"tag": t}) for t in ("good", "bad")])
    assert good.outcome is Outcome.OK
    assert bad.block_kind is BlockKind.DENIED and "denied by" in bad.output
    # Asked once, about the good call only: the deny rule decided the other alone.
    assert [(r.tool, r.arguments["tag"]) for r in requests] == [("probe", "good")]
    assert "look at good" in requests[0].reason
    assert [tag for what, tag, _ in rec.events if what == "start"] == ["good"]


async def test_deny_stops_the_chain_and_ignores_its_arguments(
    workspace: Path, tmp_path: Path
) -> None:
    rec = Recorder()
    later: list[str] = []

    def deny(call: HookCall) -> dict[str, Any]:
        return {"decision": "deny", "reason": "not today", "arguments": {"tag": "other"}}

    def after_deny(call: HookCall) -> None:
        later.append(call.tool)

    rt = runtime(workspace, tmp_path, {}, tools=probe_tools(rec), before_hooks=[deny, after_deny])
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "t"})
    assert result.block_kind is BlockKind.DENIED and "not today" in result.output
    assert later == [] and rec.events == []
    assert kinds(rt, s.session_id, "hook.rewrote") == []
    assert kinds(rt, s.session_id, "hook.denied")[0]["phase"] == "before"


async def test_after_hook_context_is_added_for_the_model_and_stored(
    workspace: Path, tmp_path: Path
) -> None:
    rec = Recorder()
    context = hook_command(
        tmp_path,
        "context",
        """
        call = json.load(sys.stdin)
        print(json.dumps({"context": "lint says: " + call["result"]}))
        """,
    )
    rt = runtime(workspace, tmp_path, {"hooks": {"after": [context]}}, tools=probe_tools(rec))
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "t"})
    assert result.outcome is Outcome.OK
    assert result.output.startswith("done t")
    assert "lint says: done t" in result.output and "hook" in result.output
    (added,) = kinds(rt, s.session_id, "hook.context")
    assert added["context"] == "lint says: done t"


async def test_plan_mode_judges_the_rewritten_call(workspace: Path, tmp_path: Path) -> None:
    """Plan mode's refusal is checked before the hooks, and again on what a hook rewrote."""
    rec = Recorder()

    def make_it_write(call: HookCall) -> HookDecision:
        return HookDecision(arguments={**call.arguments, "effect": "side_effecting"})

    rt = runtime(workspace, tmp_path, {}, tools=probe_tools(rec), before_hooks=[make_it_write])
    s = rt.open_session(mode="plan")
    result = await rt.call(s, "probe", {"tag": "t"})
    assert result.block_kind is BlockKind.DENIED and "plan" in result.output
    assert rec.events == [] and rec.effects == []
