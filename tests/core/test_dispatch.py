"""The dispatcher: pre-flight in model order, barriers, bounds, order of results."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from probe_tools import Recorder, probe_tools
from zuno.config.loading import ConcurrencySettings, Config
from zuno.config.permission import PermissionRule, PermissionSettings
from zuno.core.declarations import BlockKind, Outcome
from zuno.dispatch.dispatcher import CallRequest
from zuno.policy.approvals import (
    ApprovalDecision,
    ApprovalRequest,
    ApproveAll,
    CallbackApprover,
    DenyAll,
)
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


def make_runtime(
    workspace: Path,
    tmp_path: Path,
    recorder: Recorder | None = None,
    approver: Any = None,
    failures: int = 0,
    **config: Any,
) -> Runtime:
    return Runtime(
        workspace,
        config=Config.model_validate(config),
        db_path=tmp_path / "zuno.db",
        approver=approver or ApproveAll(),
        tools=probe_tools(recorder or Recorder(), failures),
    )


def probe(tag: str, **kw: Any) -> CallRequest:
    return CallRequest("probe", {"tag": tag, **kw})


async def test_results_come_back_in_model_order(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    # The first finishes last.
    results = await rt.dispatch(
        s, [probe("a", delay=0.3), probe("b", delay=0.1), probe("c", delay=0.0)]
    )
    assert [r.output for r in results] == ["done a", "done b", "done c"]
    kinds = [(e.kind, e.call_id) for e in rt.store.events(s.session_id) if e.kind == "call.result"]
    assert [cid for _, cid in kinds] == [r.call_id for r in results]


async def test_parallel_calls_overlap_and_exclusive_is_a_barrier(
    workspace: Path, tmp_path: Path
) -> None:
    rec = Recorder()
    rt = make_runtime(workspace, tmp_path, rec)
    s = rt.open_session()
    await rt.dispatch(
        s,
        [
            probe("p1", delay=0.2),
            probe("p2", delay=0.2),
            probe("x", mode="exclusive", delay=0.05),
            probe("p3", delay=0.1),
            probe("p4", delay=0.1),
        ],
    )
    iv = rec.intervals()
    # p1 and p2 overlap.
    assert iv["p1"][0] < iv["p2"][1] and iv["p2"][0] < iv["p1"][1]
    # x starts after both ended, and p3/p4 start after x ended.
    assert iv["x"][0] > max(iv["p1"][1], iv["p2"][1])
    assert min(iv["p3"][0], iv["p4"][0]) > iv["x"][1]


async def test_a_tool_that_declares_nothing_is_strict(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path, approver=DenyAll())
    s = rt.open_session()
    result = await rt.call(s, "bare", {"value": 1})
    assert result.outcome is Outcome.BLOCKED and result.block_kind is BlockKind.DENIED
    assert result.declaration is not None
    assert result.declaration.as_dict() == {
        "effect": "side_effecting",
        "replay": "never",
        "concurrency": "exclusive",
    }


async def test_unknown_tool_is_blocked_unavailable(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    result = await rt.call(s, "rm_rf", {})
    assert result.outcome is Outcome.BLOCKED and result.block_kind is BlockKind.UNAVAILABLE
    assert "no tool named `rm_rf`" in result.output and "probe" in result.output


async def test_invalid_arguments_name_the_field(workspace: Path, tmp_path: Path) -> None:
    rec = Recorder()
    rt = make_runtime(workspace, tmp_path, rec)
    s = rt.open_session()
    bad_json, bad_field, extra = await rt.dispatch(
        s,
        [
            CallRequest("probe", '{"tag": "a",'),
            CallRequest("probe", {"tag": "a", "delay": 99}),
            CallRequest("probe", {"tag": "a", "colour": "red"}),
        ],
    )
    for r in (bad_json, bad_field, extra):
        assert r.outcome is Outcome.BLOCKED and r.block_kind is BlockKind.INVALID_ARGUMENTS
    assert "not valid JSON" in bad_json.output
    assert "`delay`" in bad_field.output and "less than or equal to 5" in bad_field.output
    assert "`colour` is not an argument of probe" in extra.output
    assert "Expected arguments: {tag: string" in bad_field.output
    assert rec.events == []


async def test_blocked_event_precedes_result_and_nothing_ran(
    workspace: Path, tmp_path: Path
) -> None:
    rec = Recorder()
    rt = make_runtime(workspace, tmp_path, rec, approver=DenyAll())
    s = rt.open_session()
    r = await rt.call(s, "probe", {"tag": "w", "effect": "side_effecting"})
    assert r.outcome is Outcome.BLOCKED and r.block_kind is BlockKind.DENIED
    assert "non-interactive" in r.output and "Nothing was run" in r.output
    assert rec.effects == [] and rec.events == []
    events = [e.kind for e in rt.store.events(s.session_id) if e.call_id == r.call_id]
    assert events.index("dispatch.blocked") < events.index("call.result")
    (row,) = rt.store.calls(s.session_id)
    assert (row.outcome, row.block_kind) == ("blocked", "denied")


async def test_strict_mode_prompts_only_side_effects(workspace: Path, tmp_path: Path) -> None:
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    rt = make_runtime(workspace, tmp_path, approver=CallbackApprover(approve))
    s = rt.open_session()
    await rt.dispatch(s, [probe("r"), probe("w", effect="side_effecting")])
    assert [a.tool for a in asked] == ["probe"]
    assert asked[0].arguments["tag"] == "w"


async def test_session_approval_is_bound_to_the_exact_call(workspace: Path, tmp_path: Path) -> None:
    asked: list[str] = []

    def approve(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request.arguments["tag"])
        return ApprovalDecision.APPROVE_SESSION

    rt = make_runtime(workspace, tmp_path, approver=CallbackApprover(approve))
    s = rt.open_session()
    w = {"tag": "w", "effect": "side_effecting"}
    await rt.call(s, "probe", w)
    await rt.call(s, "probe", w)  # same call: remembered
    await rt.call(s, "probe", {**w, "tag": "w2"})  # different arguments: asked again
    assert asked == ["w", "w2"]
    # Another session does not inherit it.
    other = rt.open_session()
    await rt.call(other, "probe", w)
    assert asked == ["w", "w2", "w"]


async def test_approvals_are_asked_in_model_order_before_anything_runs(
    workspace: Path, tmp_path: Path
) -> None:
    rec = Recorder()
    order: list[str] = []

    def approve(request: ApprovalRequest) -> bool:
        order.append(request.arguments["tag"])
        assert rec.events == [], "an approval was asked after a call of the batch ran"
        return True

    rt = make_runtime(workspace, tmp_path, rec, approver=CallbackApprover(approve))
    s = rt.open_session()
    await rt.dispatch(
        s,
        [
            probe("a", effect="side_effecting"),
            probe("r"),
            probe("b", effect="side_effecting", mode="exclusive"),
        ],
    )
    assert order == ["a", "b"]


async def test_rules_deny_beats_ask_beats_allow(workspace: Path, tmp_path: Path) -> None:
    rules = [
        {"tool": "probe", "pattern": "*", "action": "allow"},
        {"tool": "probe", "pattern": "secret*", "action": "deny"},
        {"tool": "probe", "pattern": "ask*", "action": "ask"},
    ]
    rt = make_runtime(workspace, tmp_path, approver=DenyAll(), permission={"rules": rules})
    s = rt.open_session()
    allowed, denied, asked = await rt.dispatch(
        s,
        [
            probe("plain", effect="side_effecting"),
            probe("secret-1"),
            probe("ask-1"),
        ],
    )
    assert allowed.outcome is Outcome.OK
    assert denied.block_kind is BlockKind.DENIED and "rule 'deny probe'" in denied.output
    assert asked.block_kind is BlockKind.DENIED and "needed approval" in asked.output


async def test_safe_call_is_retried_each_attempt_a_row(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path, failures=2, replay={"base_delay": 0.0})
    s = rt.open_session()
    result = await rt.call(s, "flaky", {"key": "k"})
    assert result.outcome is Outcome.OK and result.attempt == 3
    rows = rt.store.calls(s.session_id)
    assert [(r.attempt, r.outcome) for r in rows] == [(1, "error"), (2, "error"), (3, "ok")]
    assert len({r.call_id for r in rows}) == 1


async def test_never_call_is_not_retried(workspace: Path, tmp_path: Path) -> None:
    rec = Recorder()
    rt = make_runtime(workspace, tmp_path, rec)
    s = rt.open_session()
    result = await rt.call(
        s, "probe", {"tag": "t", "effect": "side_effecting", "fail": "transient"}
    )
    assert result.outcome is Outcome.ERROR and result.attempt == 1
    assert rec.effects == ["t"]
    assert len(rt.store.calls(s.session_id)) == 1


async def test_crash_inside_a_tool_is_an_error_not_an_exception(
    workspace: Path, tmp_path: Path
) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "t", "fail": "crash"})
    assert result.outcome is Outcome.ERROR and "RuntimeError" in result.output


async def test_started_row_is_written_before_the_effect(workspace: Path, tmp_path: Path) -> None:
    seen: list[str] = []
    rec = Recorder()
    rt = make_runtime(workspace, tmp_path, rec)
    s = rt.open_session()
    original = rec.mark

    def mark(what: str, tag: str) -> None:
        if what == "start":
            seen.extend(r.status for r in rt.store.calls(s.session_id))
        original(what, tag)

    rec.mark = mark  # type: ignore[method-assign]
    await rt.call(s, "probe", {"tag": "t"})
    assert seen == ["started"]


async def test_cancelling_a_dispatch_leaves_no_started_row(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path)
    s = rt.open_session()
    with anyio.move_on_after(0.3):
        await rt.dispatch(
            s,
            [
                probe("slow", effect="side_effecting", mode="exclusive", delay=5),
                probe("later", delay=0),
            ],
        )
    rows = {json.loads(r.arguments)["tag"]: r for r in rt.store.calls(s.session_id)}
    assert rows["slow"].status == "finished" and rows["slow"].outcome == "uncertain"
    assert rows["later"].outcome == "error" and "nothing was run" in (rows["later"].result or "")
    assert rt.store.unfinished_calls(s.session_id) == []


async def test_concurrency_bound_of_one_is_serial(workspace: Path, tmp_path: Path) -> None:
    rec = Recorder()
    rt = make_runtime(
        workspace, tmp_path, rec, concurrency=ConcurrencySettings(tool_calls=1).model_dump()
    )
    s = rt.open_session()
    await rt.dispatch(s, [probe(f"p{i}", delay=0.01) for i in range(4)])
    iv = sorted(rec.intervals().values())
    assert all(a[1] < b[0] for a, b in itertools.pairwise(iv))


async def test_tools_map_switches_availability(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path, tools={"probe": False})
    s = rt.open_session()
    result = await rt.call(s, "probe", {"tag": "x"})
    assert result.block_kind is BlockKind.UNAVAILABLE
    assert "not enabled" in result.output


async def test_agent_allowlist_replaces_the_surface(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path, agents={"narrow": {"tools": ["flaky"]}})
    s = rt.open_session(agent="narrow")
    assert s.surface.names == ["flaky"]
    result = await rt.call(s, "probe", {"tag": "x"})
    assert result.block_kind is BlockKind.UNAVAILABLE


async def test_rules_written_in_code_apply(workspace: Path, tmp_path: Path) -> None:
    # PermissionRule and PermissionSettings are the public way to write rules in code.
    settings = PermissionSettings(rules=[PermissionRule(tool="probe", pattern="x*", action="deny")])
    rt = make_runtime(workspace, tmp_path, permission=settings.model_dump())
    session = rt.open_session()
    denied = await rt.call(session, "probe", {"tag": "x1"})
    allowed = await rt.call(session, "probe", {"tag": "y1"})
    assert denied.block_kind is BlockKind.DENIED and allowed.outcome is Outcome.OK
