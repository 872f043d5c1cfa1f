"""``council_run``: members answer at once in read-only child sessions, then a synthesis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_helpers import MODEL, make_runtime, run_turn
from fake_api import FakeModelServer, Reply

pytestmark = pytest.mark.anyio

COUNCIL = {"members": ["explore", "fake:second-opinion"], "synthesizer": "fake:synth"}


async def test_council_run_appears_only_for_agents_that_can_reach_it(
    workspace: Path, model_server: FakeModelServer
) -> None:
    rt = make_runtime(workspace, model_server, council=COUNCIL)
    assert "council_run" in rt.surface("build").names
    assert "council_run" not in rt.surface("explore").names
    rt.close()
    rt = make_runtime(workspace, model_server)
    assert "council_run" not in rt.surface("build").names
    rt.close()


async def test_members_answer_and_the_synthesis_weighs_them(
    workspace: Path, model_server: FakeModelServer
) -> None:
    (workspace / "a.txt").write_text("alpha\n")
    question = json.dumps({"question": "Is a.txt about alpha?"})
    model_server.enqueue(
        Reply(tool_calls=[("c1", "council_run", question)]),
        Reply(text="Member answer X."),
        Reply(text="Member answer Y."),
        Reply(text="Both members agree: yes."),
        Reply(text="The council says yes."),
    )
    rt = make_runtime(workspace, model_server, council=COUNCIL)
    outcome = await run_turn(rt, "ask the council")
    assert outcome.answered and outcome.text == "The council says yes."
    (row,) = rt.store.calls(outcome.session_id)
    assert row.effect == "delegating"
    children = rt.store.child_sessions(outcome.session_id)
    assert len(children) == 3  # two members and the synthesis
    assert all(c.parent_call_id == row.call_id for c in children)
    titles = sorted(c.title or "" for c in children)
    assert titles == [
        "council member 1: explore",
        "council member 2: fake:second-opinion",
        "council synthesis",
    ]
    models = {c.title: c.model for c in children}
    assert models["council member 1: explore"] == MODEL  # an agent member: the asker's model
    assert models["council member 2: fake:second-opinion"] == "fake:second-opinion"
    assert models["council synthesis"] == "fake:synth"
    result = row.result or ""
    assert "Member answer X." in result and "Member answer Y." in result
    assert result.rstrip().endswith("Both members agree: yes.")
    # Members get read-only tools; the synthesis gets none and sees every answer.
    member_requests = model_server.requests[1:3]
    for request in member_requests:
        names = {t["function"]["name"] for t in request.body["tools"]}
        assert "read" in names and not names & {"write", "shell", "task", "apply_patch"}
        assert "member of a council" in request.body["messages"][0]["content"]
    synthesis = model_server.requests[3].body
    assert "tools" not in synthesis
    assert "Member answer X." in synthesis["messages"][-1]["content"]
    assert "Member answer Y." in synthesis["messages"][-1]["content"]
    rt.close()


async def test_a_member_that_cannot_start_does_not_sink_the_council(
    workspace: Path, model_server: FakeModelServer
) -> None:
    council = {"members": ["explore", "nowhere:model"], "synthesizer": "fake:synth"}
    model_server.enqueue(Reply(text="Only answer."), Reply(text="One member answered."))
    rt = make_runtime(workspace, model_server, council=council)
    state = rt.open_session(agent="build", model=MODEL)
    async with rt:
        result = await rt.call(state, "council_run", {"question": "Q?"})
    assert result.outcome.value == "ok", result.output
    data = result.data or {}
    members = data["members"]
    assert members[0]["status"] == "answered" and members[0]["answer"] == "Only answer."
    assert members[1]["status"] == "error" and "nowhere" in members[1]["error"]
    assert data["synthesis"]["text"] == "One member answered."
    rt.close()


async def test_an_agent_member_keeps_its_own_prompt(
    workspace: Path, model_server: FakeModelServer
) -> None:
    agents = {"security": {"prompt": "You review code for security flaws only."}}
    council = {"members": ["security", "fake:other"], "synthesizer": "fake:synth"}
    model_server.enqueue(
        Reply(tool_calls=[("c1", "council_run", json.dumps({"question": "Is it safe?"}))]),
        Reply(text="A."),
        Reply(text="B."),
        Reply(text="Synthesis."),
        Reply(text="Done."),
    )
    rt = make_runtime(workspace, model_server, council=council, agents=agents)
    outcome = await run_turn(rt, "ask the council")
    assert outcome.answered
    systems = [r.body["messages"][0]["content"] for r in model_server.requests[1:3]]
    own = [s for s in systems if "security flaws only" in s]
    assert len(own) == 1 and "member of a council" in own[0]
    other = next(s for s in systems if s is not own[0])
    assert "security flaws" not in other and "member of a council" in other
    rt.close()
