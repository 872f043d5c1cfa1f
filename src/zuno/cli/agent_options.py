"""What ``zuno run``, ``zuno resume`` and ``zuno chat`` share: their options and their opening.

The model and step options, the spending caps (``zuno submit`` takes those
too), the runtime an agent command opens (approvals and questions asked one at
a time at the terminal), the model's provider, and the one line a session's
cost is told in. The commands import these; nothing here imports a command.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from zuno.cli.errors import fail, warn_control_paths, warn_untrusted

if TYPE_CHECKING:
    from collections.abc import Callable

    from zuno.agent.loop import TurnOutcome
    from zuno.agent.providers import Provider
    from zuno.dispatch.session_state import SessionState
    from zuno.policy.approvals import ApprovalAnswer, ApprovalDecision, ApprovalRequest, Approver
    from zuno.session.questions import Answer, Question, Questioner
    from zuno.session.runtime import Runtime

__all__ = [
    "MaxBudgetOpt",
    "MaxStepsOpt",
    "MaxTokensBudgetOpt",
    "ModelOpt",
    "close_and_fail",
    "first_line",
    "interactive",
    "open_runtime",
    "provider_for",
    "run_one_turn",
    "spent",
]

ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        help="PROVIDER:MODEL (openai:gpt-4o, anthropic:claude-sonnet-4-5, or NAME:MODEL for a "
        "provider in zuno.json). Default: the agent's model, else zuno.json's model.",
    ),
]
MaxStepsOpt = Annotated[
    int | None,
    typer.Option("--max-steps", min=1, max=1000, help="Model steps before stopping (default 50)."),
]
MaxBudgetOpt = Annotated[
    float | None,
    typer.Option(
        "--max-budget",
        metavar="USD",
        help="Stop before the next model request once the session has cost this many US "
        "dollars (earlier turns and child agents included). Needs the model's price. "
        "Stored with the session: a resume keeps it unless given a new one.",
    ),
]
MaxTokensBudgetOpt = Annotated[
    int | None,
    typer.Option(
        "--max-tokens-budget",
        metavar="N",
        help="Stop before the next model request once the session has used N tokens "
        "(input and output, earlier turns and child agents included). Stored, as --max-budget.",
    ),
]


class _OneAtATime:
    """Approvals and questions share the terminal: one prompt at a time."""

    def __init__(self, approver: Approver, questioner: Questioner | None) -> None:
        import anyio  # imported by the commands that run: not for `zuno --help`

        self._lock = anyio.Lock()
        self._approver = approver
        self._questioner = questioner
        self.name = approver.name

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision | ApprovalAnswer:
        async with self._lock:
            return await self._approver.decide(request)

    async def ask(self, questions: Sequence[Question]) -> list[Answer]:
        assert self._questioner is not None
        async with self._lock:
            return await self._questioner.ask(questions)


def first_line(text: str, width: int = 160) -> str:
    """The first non-blank line of ``text``, cut to ``width`` characters."""
    line = next((x for x in text.strip().splitlines() if x.strip()), "")
    return line if len(line) <= width else line[: width - 3] + "..."


def interactive() -> bool:
    """Whether a person is at a terminal to answer (standard input and error are one)."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def open_runtime(workspace: Path, db: Path | None, yes: bool) -> Runtime:
    """The runtime of an agent command: approvals and questions asked at the terminal.

    Without a terminal nothing is asked (approvals are denied unless rules allow
    the call); with ``yes`` every call is approved. A runtime that cannot start
    is a one-line error and an exit, never a traceback.
    """
    from zuno.cli.approvals import LearningApprover
    from zuno.cli.trust_cmds import offer_trust
    from zuno.config.loading import ConfigError
    from zuno.policy.approvals import ApproveAll, DenyAll
    from zuno.session.runtime import Runtime
    from zuno.tools.question import TerminalQuestioner

    on_terminal = interactive()
    questioner: Questioner | None = TerminalQuestioner() if on_terminal else None
    learning = LearningApprover() if on_terminal and not yes else None
    approver: Approver = ApproveAll() if yes else learning or DenyAll()
    shared = _OneAtATime(approver, questioner)
    if on_terminal:
        # Asked once, before anything from the file is used; never without a terminal.
        offer_trust(workspace)
    from zuno.cli.headless import ExitStatus
    from zuno.durability.store import StoreUnavailable

    try:
        rt = Runtime(workspace, db_path=db, approver=shared)
    except StoreUnavailable as exc:  # the same status as with --json (docs/headless.md)
        fail(str(exc), ExitStatus.STORE_UNAVAILABLE)
    except ConfigError as exc:
        fail(str(exc))
    except Exception as exc:  # a missing rg or sandbox: say what, never a traceback
        fail(f"cannot start: {exc}")
    warn_untrusted(rt.config)
    warn_control_paths(rt)
    if learning is not None:
        learning.attach(rt)
    # The question tool looks for a questioner on the runtime (see zuno.tools.question).
    setattr(rt, "questioner", shared if questioner is not None else None)  # noqa: B010
    return rt


def close_and_fail(rt: Runtime, message: str) -> NoReturn:
    """Close the runtime (its store) before exiting with ``message``."""
    rt.close()
    fail(message)


def provider_for(model: str, rt: Runtime) -> Provider:
    """The provider of ``model``; a model that cannot be used closes ``rt`` and exits."""
    from zuno.agent.providers import ProviderError, make_provider

    try:
        return make_provider(model, rt.config.providers)
    except ProviderError as exc:
        close_and_fail(rt, str(exc))


async def run_one_turn(
    rt: Runtime,
    state: SessionState,
    provider: Provider,
    prompt: str | None,
    steps: int | None,
    on_text: Callable[[str], None],
) -> TurnOutcome:
    """One agent turn in ``rt`` (``run``, ``resume``): the provider is closed whatever
    happens, and the background jobs this process started are waited for."""
    import anyio

    from zuno.agent.loop import AgentLoop
    from zuno.cli.command_runtime import wait_for_own_jobs

    async with rt:
        loop = AgentLoop(rt, state, provider, max_steps=steps, on_text=on_text)
        try:
            outcome = await loop.run(prompt)
        finally:
            with anyio.CancelScope(shield=True):
                await provider.aclose()
        await wait_for_own_jobs(rt)
    return outcome


def spent(rt: Runtime, session_id: str) -> str:
    """The session's tokens and cost, child agents included ("" before any model reply)."""
    from zuno.policy.budget import price_for, session_usage

    usage = session_usage(rt.store, session_id, price_of=lambda m: price_for(m, rt.config))
    return usage.describe() if usage.requests else ""
