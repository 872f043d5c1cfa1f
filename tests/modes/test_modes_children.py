"""A child agent started by ``task`` works in its parent session's permission mode."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))

from agent_helpers import MODEL, make_runtime
from fake_api import FakeModelServer, Reply

from zuno.agent.loop import AgentLoop, provider_for
from zuno.policy.approvals import ApprovalDecision, ApprovalRequest, CallbackApprover

pytestmark = pytest.mark.anyio


@pytest.fixture
def model_server() -> FakeModelServer:
    with FakeModelServer() as server:
        yield server  # type: ignore[misc]


async def test_a_child_of_an_accept_edits_session_writes_unasked_and_still_asks_for_commands(
    workspace: Path, model_server: FakeModelServer
) -> None:
    asked: list[str] = []

    def approve_only_the_task(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request.tool)
        return ApprovalDecision.APPROVE_ONCE if request.tool == "task" else ApprovalDecision.DENY

    task = {"agent": "build", "prompt": "write out.txt, then touch ran.txt"}
    model_server.enqueue(
        Reply(tool_calls=[("t1", "task", json.dumps(task))]),
        Reply(tool_calls=[("k1", "write", json.dumps({"path": "out.txt", "content": "x\n"}))]),
        Reply(tool_calls=[("k2", "shell", json.dumps({"command": "touch ran.txt"}))]),
        Reply(text="Wrote it; the command was refused."),
        Reply(text="Done."),
    )
    rt = make_runtime(workspace, model_server, approver=CallbackApprover(approve_only_the_task))
    try:
        state = rt.open_session(model=MODEL, mode="accept-edits")
        provider = provider_for(rt, MODEL)
        try:
            async with rt:
                outcome = await AgentLoop(rt, state, provider).run("delegate it")
        finally:
            await provider.aclose()
        assert outcome.answered
        assert (workspace / "out.txt").read_text() == "x\n"
        assert not (workspace / "ran.txt").exists()
        assert asked == ["task", "shell"]
        (child,) = rt.store.child_sessions(state.session_id)
        rows = [(c.tool, c.outcome, c.mode) for c in rt.store.calls(child.session_id)]
        assert rows == [("write", "ok", "accept-edits"), ("shell", "blocked", "accept-edits")]
    finally:
        rt.close()
