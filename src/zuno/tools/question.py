"""The ``question`` tool: ask the user one or more structured questions.

Answers come from a :class:`~zuno.session.questions.Questioner` set on the runtime
(``runtime.questioner``): :class:`TerminalQuestioner` asks at the terminal,
:class:`CallbackQuestioner` lets a program embedding Zuno (or a test) answer.
With no questioner the result says plainly that no one could answer, so the
model proceeds on its own judgement instead of waiting.

The declaration is UserMediated / Never / Exclusive: a question needs a
person by design (it is not an approval surface), is never asked twice
behind the user's back, and holds the terminal alone. A question cancelled
before its answer is an ``error``, not ``uncertain``: asking changes nothing.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
from pydantic import Field

from zuno.contract.tool import Tool, ToolArgs, ToolContext, ToolResult
from zuno.core.declarations import Concurrency, Declaration, Effect, Replay
from zuno.session.questions import Answer, Question, Questioner

__all__ = [
    "CallbackQuestioner",
    "QuestionArgs",
    "QuestionTool",
    "TerminalQuestioner",
    "parse_answer",
]


class QuestionArgs(ToolArgs):
    """Arguments of ``question``."""

    questions: list[Question] = Field(
        min_length=1, max_length=5, description="The questions, asked in order (1 to 5)."
    )


AnswerCallback = Callable[[Sequence[Question]], "list[Answer] | Awaitable[list[Answer]]"]


class CallbackQuestioner:
    """Answers from a program: a sync or async callable returning one Answer per question."""

    name = "callback"

    def __init__(self, callback: AnswerCallback) -> None:
        self._callback = callback

    async def ask(self, questions: Sequence[Question]) -> list[Answer]:
        answers = self._callback(questions)
        if inspect.isawaitable(answers):
            answers = await answers
        return list(answers)


_CHOICES = re.compile(r"^\s*\d+(\s*[, ]\s*\d+)*\s*$")


def parse_answer(question: Question, text: str) -> Answer | str:
    """The user's typed line as an Answer, or a hint saying what to type instead."""
    text = text.strip()
    if not text:
        return Answer()
    count = len(question.options)
    if count and _CHOICES.match(text):
        numbers = [int(n) for n in re.split(r"[, ]+", text) if n]
        if any(n < 1 or n > count for n in numbers):
            return f"choose numbers from 1 to {count}"
        if len(numbers) > 1 and not question.multiple:
            return "choose one number"
        labels = [question.options[n - 1].label for n in dict.fromkeys(numbers)]
        return Answer(selected=tuple(labels))
    if question.allow_other:
        return Answer(other=text)
    return f"type the number of an option (1 to {count})"


def _render(question: Question, index: int, total: int) -> str:
    lines = [f"\n[{index}/{total}] {question.header}", question.question]
    for number, option in enumerate(question.options, 1):
        detail = f" - {option.description}" if option.description else ""
        lines.append(f"  {number}. {option.label}{detail}")
    how: list[str] = []
    if question.options:
        how.append("numbers separated by commas" if question.multiple else "a number")
    if question.allow_other:
        how.append("your own answer")
    lines.append(f"Answer with {' or '.join(how)} (empty skips): ")
    return "\n".join(lines)


@dataclass
class TerminalQuestioner:
    """Asks at the terminal, one question at a time.

    By default the answer is read with :func:`zuno.core.tty.ask_line`, so Ctrl-C at the
    question ends it at once; ``read`` (a blocking callable given the prompt) replaces it.
    """

    name: str = "terminal"
    read: Callable[[str], str] | None = None
    _lock: anyio.Lock = field(default_factory=anyio.Lock)

    async def _line(self, prompt: str) -> str:
        if self.read is None:
            from zuno.core.tty import ask_line

            return await ask_line(prompt)
        return await anyio.to_thread.run_sync(self.read, prompt, abandon_on_cancel=True)

    async def ask(self, questions: Sequence[Question]) -> list[Answer]:
        answers: list[Answer] = []
        async with self._lock:
            for index, question in enumerate(questions, 1):
                prompt = _render(question, index, len(questions))
                while True:
                    parsed = parse_answer(question, await self._line(prompt))
                    if isinstance(parsed, Answer):
                        answers.append(parsed)
                        break
                    prompt = f"Please {parsed}: "
        return answers


def _as_data(question: Question, answer: Answer) -> dict[str, Any]:
    return {
        "header": question.header,
        "question": question.question,
        "selected": list(answer.selected),
        "other": answer.other,
    }


def _as_text(question: Question, answer: Answer) -> str:
    if answer.empty:
        return f"{question.header}: (no answer: the user skipped this question)"
    parts = [*answer.selected]
    if answer.other:
        parts.append(f'"{answer.other}"')
    return f"{question.header}: {', '.join(parts)}"


class QuestionTool(Tool[QuestionArgs]):
    """Ask the user structured questions and return their answers."""

    name = "question"
    description = (
        "Ask the user 1 to 5 questions when a decision is theirs to make (a choice between "
        "approaches, a missing requirement). Each question has a short header (at most 30 "
        "characters), the question, up to 10 options with a label and a description, single "
        "or multiple choice, and whether a free answer is allowed. Returns the answers in "
        "order. When no one can answer (a non-interactive run), it says so: then decide "
        "yourself and state your assumption."
    )
    args_model = QuestionArgs
    declaration = Declaration(Effect.USER_MEDIATED, Replay.NEVER, Concurrency.EXCLUSIVE)

    async def run(self, args: QuestionArgs, ctx: ToolContext) -> ToolResult:
        questioner: Questioner | None = getattr(ctx.services, "questioner", None)
        if questioner is None:
            return ToolResult(
                "No one is available to answer questions (this run is not interactive). "
                "Nothing was asked. Proceed with your best judgement and state the "
                "assumptions you made.",
                data={"answered": False, "answers": []},
            )
        ctx.on_cancel = ToolResult(
            "Cancelled before the user answered. Nothing was changed; no answer was given.",
            is_error=True,
        )
        answers = await questioner.ask(args.questions)
        if len(answers) != len(args.questions):
            answers = [*answers[: len(args.questions)]]
            answers += [Answer()] * (len(args.questions) - len(answers))
        pairs = list(zip(args.questions, answers, strict=True))
        return ToolResult(
            "The user answered:\n" + "\n".join(_as_text(q, a) for q, a in pairs),
            data={"answered": True, "answers": [_as_data(q, a) for q, a in pairs]},
        )
