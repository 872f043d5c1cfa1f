"""The turn loop through the real SDKs against the scripted HTTP model server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import MODEL, Kind, make_runtime, run_turn
from fake_api import Failure, FakeModelServer, Reply, free_port

from zuno.agent.loop import AgentLoop, ModelNotConfigured, TurnStatus, load_history, resolve_model
from zuno.agent.messages import AssistantMessage, ToolResultMessage, UserMessage
from zuno.config.agents import AgentSettings
from zuno.config.loading import Config
from zuno.policy.approvals import ApprovalDecision, ApprovalRequest, CallbackApprover

pytestmark = pytest.mark.anyio
KINDS: list[Kind] = ["openai", "anthropic"]


def tool_results(body: dict[str, Any], kind: Kind) -> list[tuple[str, str]]:
    """(call id, content) of the tool results in a recorded request, in order."""
    out: list[tuple[str, str]] = []
    for message in body["messages"]:
        if kind == "openai" and message["role"] == "tool":
            out.append((message["tool_call_id"], message["content"]))
        if kind == "anthropic" and isinstance(message.get("content"), list):
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    content = block["content"]
                    text = content if isinstance(content, str) else content[0]["text"]
                    out.append((block["tool_use_id"], text))
    return out


@pytest.mark.parametrize("kind", KINDS)
async def test_one_reply_is_one_batch_with_results_in_call_order(
    workspace: Path, model_server: FakeModelServer, kind: Kind
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    (workspace / "b.txt").write_text("beta\n")
    model_server.enqueue(
        Reply(
            text="Reading both.",
            tool_calls=[
                ("c1", "read", '{"path": "b.txt"}'),
                ("c2", "read", '{"path": "a.txt"}'),
                ("c3", "write", '{"path": "new.txt", "content": "made"}'),
            ],
        ),
        Reply(text="Both read; new.txt written."),
    )
    rt = make_runtime(workspace, model_server, kind=kind)
    outcome = await run_turn(rt, "read the files")
    assert outcome.status is TurnStatus.ANSWERED
    assert outcome.text == "Both read; new.txt written."
    assert outcome.steps == 2
    assert (workspace / "new.txt").read_text() == "made"
    results = tool_results(model_server.requests[1].body, kind)
    assert [r[0] for r in results] == ["c1", "c2", "c3"]
    assert "beta" in results[0][1] and "alpha" in results[1][1]
    # One dispatch step holds the three calls, in the model's order.
    calls = rt.store.calls(outcome.session_id)
    assert [(c.step, c.index, c.tool) for c in calls] == [
        (1, 0, "read"),
        (1, 1, "read"),
        (1, 2, "write"),
    ]
    assert [c.model_call_id for c in calls] == ["c1", "c2", "c3"]
    rt.close()


@pytest.mark.parametrize("kind", KINDS)
async def test_unknown_tool_and_malformed_arguments_are_blocked_and_the_loop_goes_on(
    workspace: Path, model_server: FakeModelServer, kind: Kind
) -> None:
    model_server.enqueue(
        Reply(
            tool_calls=[
                ("c1", "teleport", '{"to": "mars"}'),
                ("c2", "write", '{"path": "x.txt", "content": '),
                ("c3", "read", '{"path": 7}'),
            ]
        ),
        Reply(text="Understood, nothing ran."),
    )
    rt = make_runtime(workspace, model_server, kind=kind)
    outcome = await run_turn(rt, "go")
    assert outcome.answered
    assert not (workspace / "x.txt").exists()
    results = dict(tool_results(model_server.requests[1].body, kind))
    assert results["c1"].startswith("Blocked (unavailable)")
    assert results["c2"].startswith("Blocked (invalid_arguments)")
    assert results["c3"].startswith("Blocked (invalid_arguments)")
    rows = rt.store.calls(outcome.session_id)
    assert [(r.outcome, r.block_kind) for r in rows] == [
        ("blocked", "unavailable"),
        ("blocked", "invalid_arguments"),
        ("blocked", "invalid_arguments"),
    ]
    kinds = [e.kind for e in rt.store.events(outcome.session_id)]
    assert kinds.count("dispatch.blocked") == 3
    rt.close()


async def test_tool_schemas_and_system_prompt_are_sent(
    workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(Reply(text="Hi."))
    rt = make_runtime(workspace, model_server)
    await run_turn(rt, "hello", agent="explore")
    body = model_server.requests[0].body
    names = [t["function"]["name"] for t in body["tools"]]
    assert "read" in names and "write" not in names and "shell" not in names
    system = body["messages"][0]
    assert system["role"] == "system" and "explore agent" in system["content"]
    assert str(workspace) in system["content"]
    rt.close()


async def test_conversation_is_stored_and_a_later_turn_rebuilds_it(
    workspace: Path, model_server: FakeModelServer
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    model_server.enqueue(
        Reply(text="Looking.", tool_calls=[("c1", "read", '{"path": "a.txt"}')]),
        Reply(text="It says alpha."),
        Reply(text="Still alpha."),
    )
    rt = make_runtime(workspace, model_server)
    first = await run_turn(rt, "what is in a.txt?")
    rt.close()
    # A new process: everything comes back from SQL.
    rt = make_runtime(workspace, model_server)
    history = load_history(rt.store, first.session_id)
    assert [type(m) for m in history] == [
        UserMessage,
        AssistantMessage,
        ToolResultMessage,
        AssistantMessage,
    ]
    second = await run_turn(rt, "and now?", session_id=first.session_id)
    assert second.text == "Still alpha."
    sent = model_server.requests[2].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[3]["tool_call_id"] == "c1" and "alpha" in sent[3]["content"]
    # The model step number is kept with each stored reply.
    steps = [
        b["zuno"].get("step")
        for role, b in rt.store.messages(first.session_id)
        if role == "assistant"
    ]
    assert steps == [1, 2, 3]
    rt.close()


async def test_step_limit_ends_with_a_clear_message(
    workspace: Path, model_server: FakeModelServer
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    model_server.enqueue(
        *[Reply(tool_calls=[(f"c{i}", "read", '{"path": "a.txt"}')]) for i in range(3)]
    )
    rt = make_runtime(workspace, model_server, agents={"looper": {"max_steps": 3}})
    outcome = await run_turn(rt, "loop", agent="looper")
    assert outcome.status is TurnStatus.STEP_LIMIT
    assert outcome.steps == 3
    assert "step limit" in outcome.message and "max_steps" in outcome.message
    assert model_server.remaining == 0
    rt.close()


async def test_provider_error_ends_the_turn_and_the_session_resumes(
    workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(Failure(400, "model does not exist"))
    rt = make_runtime(workspace, model_server)
    failed = await run_turn(rt, "hello")
    assert failed.status is TurnStatus.PROVIDER_ERROR
    assert "model does not exist" in failed.message
    model_server.enqueue(Reply(text="Hello again."))
    resumed = await run_turn(rt, None, session_id=failed.session_id)
    assert resumed.answered and resumed.text == "Hello again."
    sent = model_server.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[1]["content"] == "hello"
    rt.close()


async def test_unreachable_provider_names_the_setting_to_fix(workspace: Path) -> None:
    port = free_port()
    cfg = Config.model_validate(
        {
            "providers": {
                "fake": {"kind": "openai", "base_url": f"http://127.0.0.1:{port}/v1", "attempts": 1}
            }
        }
    )
    from zuno.session.runtime import Runtime

    rt = Runtime(workspace, config=cfg, db_path=workspace.parent / "z.db")
    outcome = await run_turn(rt, "hello")
    assert outcome.status is TurnStatus.PROVIDER_ERROR
    assert "providers.fake.base_url" in outcome.message
    rt.close()


async def test_calls_of_a_reply_whose_results_were_lost_are_settled_from_sql(
    workspace: Path, model_server: FakeModelServer
) -> None:
    """A crash between storing the reply and storing its results: nothing runs again."""
    (workspace / "a.txt").write_text("alpha\n")
    model_server.enqueue(Reply(text="ok"))
    rt = make_runtime(workspace, model_server)
    state = rt.open_session(agent="build", model=MODEL)
    sid = state.session_id
    rt.store.append_message(sid, "user", {"role": "user", "text": "go"})
    reply = AssistantMessage(
        tool_calls=(
            _call("m1", "read", '{"path": "a.txt"}'),
            _call("m2", "write", '{"path": "w.txt", "content": "x"}'),
        )
    )
    rt.store.append_message(
        sid, "assistant", {**reply.model_dump(mode="json"), "zuno": {"step": 1}}
    )
    # The first call was dispatched and finished before the "crash"; the second never was.
    async with rt:
        await rt.dispatch(state, [_request("read", '{"path": "a.txt"}', "m1")])
    outcome = await run_turn(rt, None, session_id=sid)
    assert outcome.answered
    results = tool_results(model_server.requests[0].body, "openai")
    assert results[0][0] == "m1" and "alpha" in results[0][1]
    assert results[1][0] == "m2" and results[1][1].startswith("Not run")
    assert not (workspace / "w.txt").exists()
    assert [c.tool for c in rt.store.calls(sid)] == ["read"]  # nothing was re-run
    rt.close()


async def test_denied_call_is_blocked_and_reaches_the_model(
    workspace: Path, model_server: FakeModelServer
) -> None:
    asked: list[ApprovalRequest] = []

    def deny(request: ApprovalRequest) -> ApprovalDecision:
        asked.append(request)
        return ApprovalDecision.DENY

    model_server.enqueue(
        Reply(tool_calls=[("c1", "write", '{"path": "w.txt", "content": "x"}')]),
        Reply(text="I was not allowed."),
    )
    rt = make_runtime(workspace, model_server, approver=CallbackApprover(deny))
    outcome = await run_turn(rt, "write")
    assert outcome.answered
    assert [r.tool for r in asked] == ["write"]
    assert not (workspace / "w.txt").exists()
    (result,) = tool_results(model_server.requests[1].body, "openai")
    assert result[1].startswith("Blocked (denied)")
    rt.close()


def test_model_resolution_order() -> None:
    cfg = Config.model_validate({"model": "openai:from-config"})
    agent = AgentSettings(model="anthropic:from-agent")
    assert resolve_model("openai:flag", agent, cfg) == "openai:flag"
    assert resolve_model(None, agent, cfg) == "anthropic:from-agent"
    assert resolve_model(None, AgentSettings(), cfg) == "openai:from-config"
    with pytest.raises(ModelNotConfigured, match="--model"):
        resolve_model(None, AgentSettings(), Config())


async def test_loop_uses_agent_prompt_from_config(
    workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(Reply(text="Arr."))
    rt = make_runtime(
        workspace,
        model_server,
        agents={"pirate": {"prompt": "Talk like a pirate.", "tools": ["read"]}},
    )
    state = rt.open_session(agent="pirate", model=MODEL)
    loop = AgentLoop(rt, state, _provider(rt))
    assert loop.system.startswith("Talk like a pirate.")
    assert "Your tools: read." in loop.system
    await loop.provider.aclose()
    rt.close()


def _provider(rt: Any) -> Any:
    from zuno.agent.loop import provider_for

    return provider_for(rt, MODEL)


def _call(call_id: str, name: str, arguments: str) -> Any:
    from zuno.agent.messages import ToolCallRequest

    return ToolCallRequest(id=call_id, name=name, arguments=arguments)


def _request(tool: str, arguments: str, model_call_id: str) -> Any:
    from zuno.dispatch.dispatcher import CallRequest

    return CallRequest(tool, json.loads(arguments), model_call_id)


async def test_a_continued_session_gets_the_recovery_notice_once(
    workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(
        # Timed out: a command that exits 3 ran to its end and is ok (issue 9).
        Reply(tool_calls=[("c1", "shell", '{"command": "sleep 30", "timeout": 1}')]),
        Reply(text="That failed."),
        Reply(text="Noted."),
    )
    rt = make_runtime(workspace, model_server)
    first = await run_turn(rt, "run it")
    (row,) = rt.store.calls(first.session_id)
    assert (row.outcome, row.replay) == ("uncertain", "never")
    # The step after the failure is the recovery turn: its notice comes from SQL.
    sent = model_server.requests[1].body["messages"]
    notice = sent[-1]
    assert notice["role"] == "user" and notice["content"].startswith("Recovery notice")
    assert row.call_id in notice["content"]
    # Continuing the session does not repeat a notice already given.
    await run_turn(rt, "go on", session_id=first.session_id)
    later = model_server.requests[2].body["messages"]
    assert (
        sum(m["content"].startswith("Recovery notice") for m in later if m["role"] == "user") == 1
    )
    assert later[-1] == {"role": "user", "content": "go on"}
    rt.close()


async def test_accepted_memories_reach_the_system_prompt(
    workspace: Path, model_server: FakeModelServer
) -> None:
    from zuno.durability.memory import decide_memory, propose_memory

    model_server.enqueue(Reply(text="Noted."))
    rt = make_runtime(workspace, model_server, memory={"enabled": True})
    accepted, _ = propose_memory(rt.store, "Tests run with make check.", "workspace", workspace)
    decide_memory(rt.store, accepted.memory_id, "accepted")
    rejected, _ = propose_memory(rt.store, "Use tabs.", "workspace", workspace)
    decide_memory(rt.store, rejected.memory_id, "rejected")
    await run_turn(rt, "hello")
    system = model_server.requests[0].body["messages"][0]["content"]
    assert "Tests run with make check." in system and "Use tabs." not in system
    rt.close()


async def test_a_failed_side_effect_makes_the_next_step_a_recovery_turn(
    workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(
        Reply(
            tool_calls=[
                ("c1", "shell", '{"command": "echo hi >> log.txt; sleep 30", "timeout": 1}')
            ]
        ),
        Reply(text="I will inspect first."),
    )
    rt = make_runtime(workspace, model_server)
    outcome = await run_turn(rt, "do it")
    (call,) = rt.store.calls(outcome.session_id)
    assert call.outcome == "uncertain"
    second = json.dumps(model_server.requests[1].body)
    assert "Recovery notice (recovery attempt 1" in second and call.call_id in second
    # The notice was given once and recorded; resuming does not repeat it.
    from zuno.durability.recovery import pending_notice

    assert pending_notice(rt.store, outcome.session_id) is None
    rt.close()
