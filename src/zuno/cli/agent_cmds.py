"""``zuno run`` and ``zuno resume``: an agent against a real model, with a live view.

The model's text streams to stdout. Everything else, on stderr as it
happens: each tool call with its declaration, approvals asked inline (strict
mode), questions answered inline, each outcome as it settles, the work of
child agents indented under the call that started them, and a final summary
with the session id. Without a terminal nothing is asked: approvals are
denied unless rules allow the call, and questions say no one can answer.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from zuno.cli.agent_options import (
    MaxBudgetOpt,
    MaxStepsOpt,
    MaxTokensBudgetOpt,
    ModelOpt,
    close_and_fail,
    first_line,
    interactive,
    open_runtime,
    provider_for,
    run_one_turn,
    spent,
)
from zuno.cli.app import app
from zuno.cli.command_runtime import open_waiting
from zuno.cli.console import lazy_console
from zuno.cli.errors import fail
from zuno.cli.options import AgentOpt, Db, ModeOpt, WaitOpt, Workspace, Yes, check_mode_name
from zuno.cli.resuming import ResumeRefused, move_session, resume_folder, stored_session
from zuno.cli.signals import Stopped, run_until_stopped
from zuno.durability.store import StoreError

# The agent loop, the providers, the runtime and the live view are imported by the
# commands that run them: registering `run` and `resume` (and `zuno --help`) needs none.
if TYPE_CHECKING:
    from zuno.agent.loop import TurnOutcome
    from zuno.agent.providers import Provider
    from zuno.cli.headless_run import HeadlessOptions
    from zuno.config.permission import PermissionMode
    from zuno.dispatch.session_state import SessionState
    from zuno.session.runtime import Runtime

__all__ = [
    "ResumeRefused",
    "move_session",
    "prompt_text",
    "resume",
    "resume_folder",
    "run",
    "stored_session",
]


class OutputFormat(StrEnum):
    """What ``--output-format`` writes on stdout."""

    TEXT = "text"
    JSON = "json"
    STREAM_JSON = "stream-json"


OutputFormatOpt = Annotated[
    OutputFormat,
    typer.Option(
        "--output-format",
        help="text (default): the live view; stream-json: one JSON event per line (as "
        "--json); json: one JSON object when the run ends (see docs/headless.md).",
    ),
]
LastMessageOpt = Annotated[
    Path | None,
    typer.Option(
        "--output-last-message",
        metavar="FILE",
        help="Also write the model's last message (the answer) to FILE when the turn ends.",
    ),
]

err = lazy_console(stderr=True, highlight=False, soft_wrap=True)


def prompt_text(prompt: str) -> str:
    """The prompt itself, or standard input's text for ``-``."""
    if prompt != "-":
        return prompt
    if sys.stdin.isatty():
        fail("the prompt - reads standard input, which is a terminal: pipe the prompt in")
    text = sys.stdin.read()
    if not text.strip():
        fail("the prompt - read nothing from standard input: pipe the prompt in")
    return text


async def _drive(
    rt: Runtime, state: SessionState, provider: Provider, prompt: str | None, steps: int | None
) -> TurnOutcome:
    from zuno.cli.live import LiveView

    view = LiveView(rt)
    stop = view.watch(state)
    try:
        outcome = await run_one_turn(rt, state, provider, prompt, steps, view.text)
    finally:
        stop()
        if view._mid_line:  # pyright: ignore[reportPrivateUsage]
            sys.stdout.write("\n")
            sys.stdout.flush()
    return outcome


def _summary(rt: Runtime, outcome: TurnOutcome) -> None:
    from zuno.agent.loop import TurnStatus

    calls = rt.store.calls(outcome.session_id)
    counts: dict[str, int] = {}
    for call in calls:
        if call.status == "finished":
            key = call.outcome or "?"
            counts[key] = counts.get(key, 0) + 1
    tally = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no tool calls"
    children = rt.store.child_sessions(outcome.session_id)
    kids = f"; {len(children)} child session(s)" if children else ""
    sid = outcome.session_id
    told = spent(rt, sid)
    kids += f"; {told}" if told else ""
    if outcome.status is TurnStatus.ANSWERED:
        err.print(
            f"[green]done[/] in {outcome.steps} step(s): {tally}{kids}. "
            f"Session [bold cyan]{sid}[/] (zuno show {sid})"
        )
        return
    from rich.text import Text

    # Text, not markup: a message is the provider's words (brackets, "openai:m:" is no emoji).
    err.print(Text.assemble(("zuno:", "bold red"), f" {outcome.message}"))
    err.print(
        f"{tally}{kids}. Session [bold cyan]{sid}[/] is saved; `zuno resume {sid}` continues it."
    )


def _finish(
    rt: Runtime,
    state: SessionState,
    provider: Provider,
    prompt: str | None,
    steps: int | None,
    last_message: Path | None = None,
) -> None:
    from zuno.agent.loop import TurnStatus
    from zuno.integrations.mcp.errors import McpServerError

    try:
        outcome = run_until_stopped(_drive, rt, state, provider, prompt, steps)
    except McpServerError as exc:
        close_and_fail(rt, str(exc))
    except Exception as exc:
        from zuno.cli.headless_run import startup_problem

        problem = startup_problem(exc)  # a missing rg: one line, the session closed
        if problem is None:
            raise
        close_and_fail(rt, problem)
    except KeyboardInterrupt as exc:
        why = f" by {exc}" if isinstance(exc, Stopped) else ""
        err.print(
            f"\n[yellow]interrupted[/]{why}. Session [bold cyan]{state.session_id}[/] is saved; "
            f"`zuno resume {state.session_id}` continues it."
        )
        rt.close()
        raise typer.Exit(exc.exit_code if isinstance(exc, Stopped) else 130) from None
    if last_message is not None:
        from zuno.cli.run_report import write_last_message

        problem = write_last_message(last_message, outcome.text)
        if problem is not None:
            err.print(f"zuno: {problem}", markup=False)
    try:
        _summary(rt, outcome)
    finally:
        rt.close()
    if outcome.status is not TurnStatus.ANSWERED:
        from zuno.cli.headless import ExitStatus

        raise typer.Exit(
            ExitStatus.BUDGET if outcome.status is TurnStatus.BUDGET else ExitStatus.NOT_ANSWERED
        )


def _set_budget(rt: Runtime, model: str, max_usd: float | None, max_tokens: int | None) -> None:
    """Give the runtime its spending cap; a cap that cannot be kept is a usage error."""
    if max_usd is None and max_tokens is None:
        return
    from zuno.policy.budget import Budget, BudgetError

    try:
        budget = Budget(max_usd, max_tokens)
        budget.check_model(model, rt.config)
    except BudgetError as exc:
        close_and_fail(rt, str(exc))
    rt.budget = budget


HeadlessOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="For programs: one JSON event per line on stdout, nothing asked "
        "(see docs/headless.md).",
    ),
]


@app.command()
def run(
    prompt: Annotated[
        str, typer.Argument(help="What the agent should do; - reads it from standard input.")
    ],
    agent: AgentOpt = "build",
    model: ModelOpt = None,
    yes: Yes = False,
    mode: ModeOpt = None,
    max_steps: MaxStepsOpt = None,
    max_budget: MaxBudgetOpt = None,
    max_tokens_budget: MaxTokensBudgetOpt = None,
    json_: HeadlessOpt = False,
    output_format: OutputFormatOpt = OutputFormat.TEXT,
    last_message: LastMessageOpt = None,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """Run an agent on PROMPT until it answers.

    Exit status: 0 answered, 1 no answer (model error, step limit), 2 usage or
    configuration error, 3 budget reached, 4 store unavailable, 130 interrupted.
    """
    from zuno.agent.loop import resolve_model
    from zuno.agent.providers import ProviderError
    from zuno.session.runtime import UnknownAgent

    prompt = prompt_text(prompt)
    if json_ or output_format is not OutputFormat.TEXT:
        from zuno.cli.headless_run import run_headless

        options = _headless_options(
            model,
            yes,
            max_steps,
            db,
            mode,
            max_budget,
            max_tokens_budget,
            output_format,
            last_message,
        )
        run_headless(prompt, agent=agent, workspace=workspace, options=options)
    rt = open_runtime(workspace, db, yes)
    try:
        settings = rt.agent_settings(agent)
        chosen = resolve_model(model, settings, rt.config)
    except (UnknownAgent, ProviderError) as exc:
        close_and_fail(rt, str(exc))
    _set_budget(rt, chosen, max_budget, max_tokens_budget)
    provider = provider_for(chosen, rt)
    title = first_line(prompt, 80)
    state = rt.open_session(agent=agent, model=chosen, title=title, mode=_mode(mode))
    _finish(rt, state, provider, prompt, max_steps, last_message)


@app.command()
def resume(
    session: Annotated[str, typer.Argument(help="The session id (a unique prefix is enough).")],
    prompt: Annotated[
        str | None,
        typer.Argument(
            help="A new instruction (needed after a finished answer); - reads it from "
            "standard input."
        ),
    ] = None,
    model: ModelOpt = None,
    yes: Yes = False,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            callback=check_mode_name,
            metavar="MODE",
            help="Switch the session to this permission mode (stored: later resumes keep it). "
            "Default: the mode it ran in.",
        ),
    ] = None,
    max_steps: MaxStepsOpt = None,
    max_budget: MaxBudgetOpt = None,
    max_tokens_budget: MaxTokensBudgetOpt = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            "-w",
            help="The session's own workspace (the default, whatever the current folder); "
            "another folder needs --move-to.",
        ),
    ] = None,
    move_to: Annotated[
        Path | None,
        typer.Option(
            "--move-to",
            help="Continue the session in this folder instead of its own: the session keeps "
            "the new folder, and the model is told in a note of the transcript.",
        ),
    ] = None,
    json_: HeadlessOpt = False,
    output_format: OutputFormatOpt = OutputFormat.TEXT,
    last_message: LastMessageOpt = None,
    db: Db = None,
    wait: WaitOpt = 0.0,
) -> None:
    """Continue a stored session in its own workspace: where it stopped, or with a new PROMPT.

    Without PROMPT on a terminal, the session continues as an interactive chat
    (`zuno chat`): an unfinished turn first, then the next prompt is asked.
    """
    from zuno.agent.loop import load_history, resolve_model
    from zuno.agent.messages import AssistantMessage
    from zuno.agent.providers import ProviderError
    from zuno.cli.transcript import moved_note
    from zuno.session.lifecycle import UnknownSession
    from zuno.session.runtime import UnknownAgent

    if prompt is not None:
        prompt = prompt_text(prompt)
    if json_ or output_format is not OutputFormat.TEXT:
        from zuno.cli.headless_run import resume_headless

        options = _headless_options(
            model,
            yes,
            max_steps,
            db,
            mode,
            max_budget,
            max_tokens_budget,
            output_format,
            last_message,
        )
        resume_headless(
            session, prompt, workspace=workspace, move_to=move_to, wait=wait, options=options
        )
    try:
        record = stored_session(session, db)
        home = Path(record.workspace)
        target = resume_folder(record.session_id, home, workspace, move_to)
    except (UnknownSession, StoreError, ResumeRefused) as exc:
        fail(str(exc))
    rt = open_runtime(target, db, yes)
    try:
        state = open_waiting(rt, record.session_id, wait)
        if mode is not None:
            rt.set_mode(state, cast("PermissionMode", mode))
        chosen = resolve_model(model or record.model, state.agent, rt.config)
    except (UnknownSession, UnknownAgent, ProviderError, StoreError) as exc:
        close_and_fail(rt, str(exc))
    history = load_history(rt.store, state.session_id)
    chatting = prompt is None and interactive()  # on a terminal: the chat, in this session
    if prompt is None:
        last = history[-1] if history else None
        finished = last is None or (isinstance(last, AssistantMessage) and not last.tool_calls)
        if finished and not chatting:
            why = "has no conversation" if last is None else "ended with an answer"
            close_and_fail(
                rt,
                f"session {state.session_id} {why}; say what to do next: "
                f'zuno resume {state.session_id} "PROMPT"',
            )
    _set_budget(rt, chosen, max_budget, max_tokens_budget)
    provider = provider_for(chosen, rt)
    if target != home:
        move_session(rt, state.session_id, home, target)
        # The model hears of the move in the turn's user message, which the transcript keeps.
        note = moved_note(str(home), str(target))
        prompt = note if prompt is None else f"{note}\n\n{prompt}"
    if chatting:
        from zuno.cli.chat import Chat, run_chat

        chat = Chat(rt, state.agent_name, chosen, provider, state, max_steps=max_steps, db=db)
        last = history[-1] if history else None
        # The model had not answered yet (calls pending, or a step limit): that turn first.
        unfinished = last is not None and not (
            isinstance(last, AssistantMessage) and not last.tool_calls
        )
        run_chat(chat, first_turn=unfinished or prompt is not None, first_prompt=prompt)
        return
    _finish(rt, state, provider, prompt, max_steps, last_message)


def _headless_options(
    model: str | None,
    yes: bool,
    max_steps: int | None,
    db: Path | None,
    mode: str | None,
    max_budget: float | None,
    max_tokens_budget: int | None,
    output_format: OutputFormat,
    last_message: Path | None,
) -> HeadlessOptions:
    """The options of a headless run or resume, as given on the command line."""
    from zuno.cli.headless_run import HeadlessOptions

    return HeadlessOptions(
        model=model,
        yes=yes,
        max_steps=max_steps,
        db=db,
        mode=mode,
        max_budget=max_budget,
        max_tokens_budget=max_tokens_budget,
        output="json" if output_format is OutputFormat.JSON else "stream-json",
        last_message=last_message,
    )


def _mode(name: str | None) -> PermissionMode | None:
    """A ``--mode`` value (click checked it is one of the modes)."""
    return cast("PermissionMode | None", name)
