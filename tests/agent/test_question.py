"""The ``question`` tool: structured answers, the terminal parser, no one to answer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from agent_helpers import MODEL, make_runtime, run_turn
from fake_api import FakeModelServer, Reply

from zuno.session.questions import Answer, Option, Question
from zuno.tools.question import CallbackQuestioner, TerminalQuestioner, parse_answer

pytestmark = pytest.mark.anyio

QUESTIONS = {
    "questions": [
        {
            "header": "Database",
            "question": "Which database should the service use?",
            "options": [
                {"label": "SQLite", "description": "One file, no server."},
                {"label": "PostgreSQL", "description": "Shared by several workers."},
            ],
        },
        {
            "header": "Features",
            "question": "Which extras?",
            "options": [{"label": "metrics"}, {"label": "tracing"}, {"label": "auth"}],
            "multiple": True,
            "allow_other": False,
        },
    ]
}


async def test_answers_come_back_structured_to_the_model(
    workspace: Path, model_server: FakeModelServer
) -> None:
    seen: list[Sequence[Question]] = []

    def answer(questions: Sequence[Question]) -> list[Answer]:
        seen.append(questions)
        return [Answer(selected=("PostgreSQL",)), Answer(selected=("metrics", "auth"))]

    model_server.enqueue(
        Reply(tool_calls=[("q1", "question", json.dumps(QUESTIONS))]),
        Reply(text="PostgreSQL with metrics and auth it is."),
    )
    rt = make_runtime(workspace, model_server)
    rt.questioner = CallbackQuestioner(answer)  # type: ignore[attr-defined]
    outcome = await run_turn(rt, "set it up")
    assert outcome.answered
    assert [q.header for q in seen[0]] == ["Database", "Features"]
    (row,) = rt.store.calls(outcome.session_id)
    assert row.effect == "user_mediated" and row.concurrency == "exclusive"
    sent = model_server.requests[1].body["messages"][-1]
    assert sent["tool_call_id"] == "q1"
    assert "Database: PostgreSQL" in sent["content"]
    assert "Features: metrics, auth" in sent["content"]
    rt.close()


async def test_data_holds_each_answer(workspace: Path, model_server: FakeModelServer) -> None:
    rt = make_runtime(workspace, model_server)
    rt.questioner = CallbackQuestioner(  # type: ignore[attr-defined]
        lambda qs: [Answer(other="MariaDB, actually"), Answer()]
    )
    state = rt.open_session(agent="build", model=MODEL)
    result = await rt.call(state, "question", QUESTIONS)
    assert result.data == {
        "answered": True,
        "answers": [
            {
                "header": "Database",
                "question": "Which database should the service use?",
                "selected": [],
                "other": "MariaDB, actually",
            },
            {"header": "Features", "question": "Which extras?", "selected": [], "other": None},
        ],
    }
    assert "skipped" in result.output
    rt.close()


async def test_no_one_to_answer_says_so(workspace: Path, model_server: FakeModelServer) -> None:
    rt = make_runtime(workspace, model_server)
    state = rt.open_session(agent="build", model=MODEL)
    result = await rt.call(state, "question", QUESTIONS)
    assert result.outcome.value == "ok"
    assert "No one is available to answer" in result.output
    assert result.data == {"answered": False, "answers": []}
    rt.close()


async def test_question_without_options_must_allow_a_free_answer(
    workspace: Path, model_server: FakeModelServer
) -> None:
    rt = make_runtime(workspace, model_server)
    state = rt.open_session(agent="build", model=MODEL)
    bad = {"questions": [{"header": "H", "question": "Q?", "allow_other": False}]}
    result = await rt.call(state, "question", bad)
    assert result.outcome.value == "blocked" and result.block_kind is not None
    assert result.block_kind.value == "invalid_arguments"
    assert "free answer" in result.output
    rt.close()


def _q(multiple: bool = False, allow_other: bool = True) -> Question:
    return Question(
        header="Pick",
        question="Which?",
        options=[Option(label="a"), Option(label="b"), Option(label="c")],
        multiple=multiple,
        allow_other=allow_other,
    )


def test_parse_answer() -> None:
    assert parse_answer(_q(), "2") == Answer(selected=("b",))
    assert parse_answer(_q(), "something else") == Answer(other="something else")
    assert parse_answer(_q(), "  ") == Answer()
    assert parse_answer(_q(), "1,3") == "choose one number"
    assert parse_answer(_q(multiple=True), "1, 3 3") == Answer(selected=("a", "c"))
    assert parse_answer(_q(), "9") == "choose numbers from 1 to 3"
    assert parse_answer(_q(allow_other=False), "maybe") == "type the number of an option (1 to 3)"


async def test_terminal_questioner_asks_again_until_the_answer_fits() -> None:
    lines = iter(["7", "3"])
    prompts: list[str] = []

    def read(prompt: str) -> str:
        prompts.append(prompt)
        return next(lines)

    answers = await TerminalQuestioner(read=read).ask([_q()])
    assert answers == [Answer(selected=("c",))]
    assert "1. a" in prompts[0] and "Pick" in prompts[0]
    assert prompts[1] == "Please choose numbers from 1 to 3: "
