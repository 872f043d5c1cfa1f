"""Compaction: near the context window the model gets its own summary instead of the past.

Every test runs the agent loop against the scripted model server on
127.0.0.1 and judges by what the server was sent and what the store keeps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_helpers import MODEL, make_runtime, run_turn
from fake_api import FakeModelServer, Reply

from zuno.agent.compaction import CompactionFailed
from zuno.agent.loop import AgentLoop, provider_for
from zuno.policy.budget import session_usage

SMALL_WINDOW: dict[str, Any] = {"models": {MODEL: {"context_window": 1000}}}


def _messages(server: FakeModelServer, request: int) -> list[dict[str, Any]]:
    return server.requests[request].body["messages"]


def _texts(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


@pytest.mark.anyio
async def test_a_session_near_its_window_is_compacted_and_keeps_going(
    workspace: Path, model_server: FakeModelServer
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    model_server.enqueue(
        # 950 of 1000 tokens: the next request would not fit for long.
        Reply(
            text="Reading.",
            tool_calls=[("c1", "read", '{"path": "a.txt"}')],
            input_tokens=900,
            output_tokens=50,
        ),
        Reply(text="SUMMARY-1: the user wants a.txt read; it says alpha.", input_tokens=950),
        Reply(text="It says alpha.", input_tokens=120),
        Reply(text="Still alpha.", input_tokens=140),
    )
    rt = make_runtime(workspace, model_server, models=SMALL_WINDOW["models"])
    try:
        first = await run_turn(rt, "Read a.txt for me")
        assert first.answered and first.text == "It says alpha."
        assert len(model_server.requests) == 3

        # The summary request: the whole conversation, then the ask for a summary.
        asked = _messages(model_server, 1)
        assert "Read a.txt for me" in _texts(asked) and "alpha" in _texts(asked)
        assert "Summarise the conversation" in str(asked[-1]["content"])

        # The next step sees the summary instead of what came before it.
        after = _messages(model_server, 2)
        assert [m["role"] for m in after] == ["system", "user"]
        assert "SUMMARY-1" in str(after[1]["content"])
        assert "Read a.txt for me" not in _texts(after[1:])

        # The session keeps going from the summary in a later turn.
        second = await run_turn(rt, "And now?", session_id=first.session_id)
        assert second.answered and second.text == "Still alpha."
        later = _messages(model_server, 3)
        assert [m["role"] for m in later] == ["system", "user", "assistant", "user"]
        assert "SUMMARY-1" in str(later[1]["content"])
        assert later[2]["content"] == "It says alpha." and later[3]["content"] == "And now?"

        # The store keeps everything, and says when and why it compacted.
        stored = rt.store.messages(first.session_id)
        kept = "\n".join(str(body.get("text") or body.get("content") or "") for _r, body in stored)
        assert "Read a.txt for me" in kept and "alpha\n" in kept and "SUMMARY-1" in kept
        (compacted,) = [e for e in rt.store.events(first.session_id) if e.kind == "agent.compacted"]
        assert compacted.data["reason"] == "context" and compacted.data["number"] == 1
        assert "SUMMARY-1" in compacted.data["summary"]
        # The summary request is paid for like any reply.
        assert session_usage(rt.store, first.session_id).requests == 4
    finally:
        rt.close()


@pytest.mark.anyio
async def test_compact_on_demand_with_a_focus(
    workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(
        Reply(text="Hello there."),
        Reply(text="SUMMARY-2: greeted the user."),
        Reply(text="Yes, we met."),
    )
    rt = make_runtime(workspace, model_server)  # an unknown window: never on its own
    try:
        first = await run_turn(rt, "Hi")
        state = rt.open_session(first.session_id)
        provider = provider_for(rt, MODEL)
        try:
            loop = AgentLoop(rt, state, provider)
            done = await loop.compact("the greeting")
        finally:
            await provider.aclose()
        assert (done.number, done.reason, done.replaced) == (1, "requested", 2)
        assert "Keep above all: the greeting" in str(_messages(model_server, 1)[-1]["content"])
        second = await run_turn(rt, "Did we meet?", session_id=first.session_id)
        assert second.text == "Yes, we met."
        sent = _messages(model_server, 2)
        assert "SUMMARY-2" in str(sent[1]["content"]) and "Hello there." not in _texts(sent)
    finally:
        rt.close()


@pytest.mark.anyio
async def test_nothing_to_compact_is_refused(
    workspace: Path, model_server: FakeModelServer
) -> None:
    rt = make_runtime(workspace, model_server)
    try:
        state = rt.open_session(agent="build", model=MODEL)
        provider = provider_for(rt, MODEL)
        try:
            with pytest.raises(CompactionFailed, match="nothing to compact"):
                await AgentLoop(rt, state, provider).compact()
        finally:
            await provider.aclose()
        assert model_server.requests == []
    finally:
        rt.close()


@pytest.mark.anyio
async def test_a_new_prompt_is_sent_as_written_after_a_compaction(
    workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(
        Reply(text="A long answer.", input_tokens=900, output_tokens=60),
        Reply(text="SUMMARY-3: answered at length."),
        Reply(text="Short now."),
    )
    rt = make_runtime(workspace, model_server, models=SMALL_WINDOW["models"])
    try:
        first = await run_turn(rt, "Tell me everything")
        second = await run_turn(rt, "Now be brief", session_id=first.session_id)
        assert second.text == "Short now."
        assert "Now be brief" not in _texts(_messages(model_server, 1))  # not summarised
        sent = _messages(model_server, 2)
        assert [m["role"] for m in sent] == ["system", "user", "user"]
        assert "SUMMARY-3" in str(sent[1]["content"]) and sent[2]["content"] == "Now be brief"
    finally:
        rt.close()
