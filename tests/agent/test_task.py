"""Delegation with ``task``: child sessions, narrowed tools, approvals and the bound."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import pytest
from agent_helpers import MODEL, make_runtime, run_turn
from fake_api import FakeModelServer, Reply

from zuno.agent.delegation import MAX_DEPTH
from zuno.agent.loop import use_provider_factory
from zuno.agent.messages import Message, ModelReply, ToolSpec
from zuno.dispatch.dispatcher import CallRequest
from zuno.policy.approvals import ApprovalDecision, ApprovalRequest, CallbackApprover

pytestmark = pytest.mark.anyio


def task_call(call_id: str, agent: str, prompt: str, **extra: object) -> tuple[str, str, str]:
    return (call_id, "task", json.dumps({"agent": agent, "prompt": prompt, **extra}))


async def test_child_runs_in_its_own_session_and_its_answer_is_the_result(
    workspace: Path, model_server: FakeModelServer
) -> None:
    (workspace / "notes.txt").write_text("the answer is 42\n")
    model_server.enqueue(
        Reply(tool_calls=[task_call("t1", "explore", "Find the answer in notes.txt")]),
        Reply(text="Reading.", tool_calls=[("k1", "read", '{"path": "notes.txt"}')]),
        Reply(text="The answer is 42 (notes.txt:1)."),
        Reply(text="The child says 42."),
    )
    rt = make_runtime(workspace, model_server)
    outcome = await run_turn(rt, "what is the answer?")
    assert outcome.answered and outcome.text == "The child says 42."
    (child,) = rt.store.child_sessions(outcome.session_id)
    assert child.agent == "explore"
    (task_row,) = [c for c in rt.store.calls(outcome.session_id) if c.tool == "task"]
    assert child.parent_call_id == task_row.call_id
    assert task_row.effect == "delegating" and task_row.concurrency == "parallel_safe"
    assert "The answer is 42 (notes.txt:1)." in (task_row.result or "")
    assert [c.tool for c in rt.store.calls(child.session_id)] == ["read"]
    # The child's own request went out with the explore prompt and read-only tools.
    child_request = model_server.requests[1].body
    assert child_request["messages"][1]["content"] == "Find the answer in notes.txt"
    tools = {t["function"]["name"] for t in child_request["tools"]}
    assert "read" in tools and not tools & {"write", "shell", "apply_patch", "task"}
    rt.close()


async def test_child_cannot_use_a_tool_its_parent_did_not_have(
    workspace: Path, model_server: FakeModelServer
) -> None:
    """An explore parent delegating to build: the child still has no write."""
    model_server.enqueue(
        Reply(tool_calls=[task_call("t1", "build", "Create out.txt")]),
        Reply(tool_calls=[("k1", "write", '{"path": "out.txt", "content": "x"}')]),
        Reply(text="I could not write."),
        Reply(text="Done."),
    )
    rt = make_runtime(workspace, model_server, agents={"lead": {"tools": ["read", "grep", "task"]}})
    outcome = await run_turn(rt, "make a file", agent="lead")
    assert outcome.answered
    assert not (workspace / "out.txt").exists()
    (child,) = rt.store.child_sessions(outcome.session_id)
    (row,) = rt.store.calls(child.session_id)
    assert (row.tool, row.outcome, row.block_kind) == ("write", "blocked", "unavailable")
    child_tools = {t["function"]["name"] for t in model_server.requests[1].body["tools"]}
    assert child_tools == {"read", "grep", "task"}
    rt.close()


async def test_each_child_side_effect_is_approved_on_its_own(
    workspace: Path, model_server: FakeModelServer
) -> None:
    asked: list[ApprovalRequest] = []

    def decide(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        # The delegation is approved; the child's second write is denied.
        if request.tool == "write" and "no.txt" in request.preview:
            return ApprovalDecision.DENY
        return ApprovalDecision.APPROVE_ONCE

    model_server.enqueue(
        Reply(tool_calls=[task_call("t1", "build", "Write two files")]),
        Reply(
            tool_calls=[
                ("k1", "write", '{"path": "yes.txt", "content": "1"}'),
                ("k2", "write", '{"path": "no.txt", "content": "2"}'),
            ]
        ),
        Reply(text="One of two."),
        Reply(text="Child wrote one file."),
    )
    rt = make_runtime(workspace, model_server, approver=CallbackApprover(decide))
    outcome = await run_turn(rt, "delegate")
    assert outcome.answered
    (child,) = rt.store.child_sessions(outcome.session_id)
    assert [(r.tool, r.session_id) for r in asked] == [
        ("task", outcome.session_id),
        ("write", child.session_id),
        ("write", child.session_id),
    ]
    assert (workspace / "yes.txt").exists() and not (workspace / "no.txt").exists()
    rows = rt.store.calls(child.session_id)
    assert [(r.outcome, r.block_kind) for r in rows] == [("ok", None), ("blocked", "denied")]
    rt.close()


async def test_requested_tools_narrow_and_may_not_widen(
    workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(
        Reply(
            tool_calls=[
                task_call("t1", "build", "Only grep", tools=["grep"]),
                task_call("t2", "explore", "Sneaky", tools=["read", "shell"]),
            ]
        ),
        Reply(text="Grepped."),
        Reply(text="Done."),
    )
    rt = make_runtime(workspace, model_server, agents={"lead": {"tools": ["read", "grep", "task"]}})
    outcome = await run_turn(rt, "go", agent="lead")
    rows = rt.store.calls(outcome.session_id)
    assert rows[0].outcome == "ok"
    # Refused before anything started (issue 9): blocked, not failed.
    assert rows[1].outcome == "blocked" and rows[1].block_kind == "invalid_arguments"
    assert "shell" in (rows[1].result or "")
    assert "only narrow" in (rows[1].result or "")
    child_tools = [t["function"]["name"] for t in model_server.requests[1].body["tools"]]
    assert child_tools == ["grep"]
    assert len(rt.store.child_sessions(outcome.session_id)) == 1  # the refused one never started
    rt.close()


async def test_unknown_agent_is_refused_naming_the_known_ones(
    workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(Reply(tool_calls=[task_call("t1", "wizard", "x")]), Reply(text="ok"))
    rt = make_runtime(workspace, model_server)
    outcome = await run_turn(rt, "go")
    (row,) = rt.store.calls(outcome.session_id)
    assert row.outcome == "blocked" and row.block_kind == "invalid_arguments"
    assert "wizard" in (row.result or "") and "explore" in (row.result or "")
    rt.close()


async def test_delegation_depth_is_capped(workspace: Path, model_server: FakeModelServer) -> None:
    rt = make_runtime(workspace, model_server)
    deep = rt.open_session(agent="build", model=MODEL, depth=MAX_DEPTH)
    async with rt:
        result = await rt.call(deep, "task", {"agent": "explore", "prompt": "x"})
    assert result.outcome.value == "blocked"
    assert result.block_kind is not None and result.block_kind.value == "invalid_arguments"
    assert f"limited to {MAX_DEPTH} levels" in result.output
    assert model_server.requests == []
    rt.close()


class _Tracker:
    def __init__(self) -> None:
        self.active = 0
        self.peak = 0
        self.both_in = anyio.Event()


class _ChildModel:
    """A provider for children: counts how many are answering at once."""

    def __init__(self, tracker: _Tracker, wait_for_peer: bool) -> None:
        self._tracker = tracker
        self._wait = wait_for_peer
        self.label = "fake:child"

    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        on_text: Callable[[str], None] | None = None,
    ) -> ModelReply:
        t = self._tracker
        t.active += 1
        t.peak = max(t.peak, t.active)
        if t.active == 2:
            t.both_in.set()
        if self._wait:
            with anyio.move_on_after(5):  # a bound in case the limiter wrongly serializes
                await t.both_in.wait()
        else:
            await anyio.sleep(0.01)
        t.active -= 1
        return ModelReply(text="child done")

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize(("bound", "peak"), [(1, 1), (2, 2)])
async def test_parallel_tasks_respect_the_delegations_bound(
    workspace: Path, model_server: FakeModelServer, bound: int, peak: int
) -> None:
    rt = make_runtime(workspace, model_server, concurrency={"delegations": bound})
    tracker = _Tracker()
    use_provider_factory(rt, lambda model: _ChildModel(tracker, wait_for_peer=bound > 1))
    state = rt.open_session(agent="build", model=MODEL)
    async with rt:
        results = await rt.dispatch(
            state,
            [
                CallRequest("task", {"agent": "explore", "prompt": p})
                for p in ("one", "two", "three")
            ],
        )
    assert [r.outcome.value for r in results] == ["ok", "ok", "ok"]
    assert tracker.peak == peak
    assert len(rt.store.child_sessions(state.session_id)) == 3
    rt.close()


async def test_nested_delegation_does_not_deadlock_with_one_slot(
    workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(
        Reply(tool_calls=[task_call("t1", "build", "delegate further")]),
        Reply(tool_calls=[task_call("t2", "explore", "look")]),
        Reply(text="grandchild answer"),
        Reply(text="child answer"),
        Reply(text="top answer"),
    )
    rt = make_runtime(workspace, model_server, concurrency={"delegations": 1})
    with anyio.fail_after(60):
        outcome = await run_turn(rt, "go")
    assert outcome.text == "top answer"
    (child,) = rt.store.child_sessions(outcome.session_id)
    (grandchild,) = rt.store.child_sessions(child.session_id)
    assert grandchild.agent == "explore"
    rt.close()


async def test_background_task_is_a_job_with_the_answer_as_output(
    workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(Reply(text="background answer"))
    rt = make_runtime(workspace, model_server)
    state = rt.open_session(agent="build", model=MODEL)
    async with rt:
        result = await rt.call(
            state, "task", {"agent": "explore", "prompt": "slowly", "background": True}
        )
        assert result.outcome.value == "ok", result.output
        assert result.declaration is not None
        assert result.declaration.concurrency.value == "isolated_background"
        job_id = str((result.data or {})["job_id"])
        await rt.jobs.wait(job_id)
        job = rt.jobs.get(job_id)
        assert job is not None and job.state.value == "succeeded" and job.kind == "task"
        data, _end = rt.jobs.read_output(job_id, 0, 10_000)
        assert b"background answer" in data
    rt.close()
