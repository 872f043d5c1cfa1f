"""The vocabulary of asking a person: questions, their answers, and who answers.

The ``question`` tool (:mod:`zuno.tools.question`) asks; a :class:`Questioner`
set on the runtime (``runtime.questioner``) answers: a terminal, a program
embedding Zuno, a test. The runtime holds one without knowing the tool.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import Field, model_validator

from zuno.contract.tool import ToolArgs

__all__ = ["Answer", "Option", "Question", "Questioner"]


class Option(ToolArgs):
    """One choice offered to the user."""

    label: str = Field(min_length=1, max_length=60, description="The choice, in a few words.")
    description: str = Field(
        default="", max_length=300, description="What choosing it means (one sentence)."
    )


class Question(ToolArgs):
    """One question."""

    header: str = Field(
        min_length=1, max_length=30, description="A short title shown above the question."
    )
    question: str = Field(min_length=1, max_length=1000, description="The question itself.")
    options: list[Option] = Field(
        default_factory=lambda: [],
        max_length=10,
        description="The choices (at most 10). Empty means a free answer only.",
    )
    multiple: bool = Field(default=False, description="Whether several options may be chosen.")
    allow_other: bool = Field(
        default=True, description="Whether the user may type their own answer instead."
    )

    @model_validator(mode="after")
    def _answerable(self) -> Question:
        if not self.options and not self.allow_other:
            raise ValueError("a question without options must allow a free answer (allow_other)")
        return self


@dataclass(frozen=True, slots=True)
class Answer:
    """The user's answer to one question.

    Attributes:
        selected: The labels of the chosen options (empty when none).
        other: The user's own words, when they typed an answer instead.
    """

    selected: tuple[str, ...] = ()
    other: str | None = None

    @property
    def empty(self) -> bool:
        """Whether the user gave no answer at all."""
        return not self.selected and not self.other


class Questioner(Protocol):
    """Puts questions to a person and returns one :class:`Answer` per question."""

    name: str

    async def ask(self, questions: Sequence[Question]) -> list[Answer]: ...
