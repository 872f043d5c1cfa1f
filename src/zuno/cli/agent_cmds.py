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
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, cast

import typer

from zuno.cli.app import (
    AgentOpt,
    Db,
    ModeOpt,
    WaitOpt,
    Workspace,
    Yes,
    app,
    check_mode_name,
    fail,
    lazy_console,
    open_waiting,
    wait_for_own_jobs,
    warn_control_paths,
    warn_untrusted,
)
from zuno.cli.signals import Stopped, run_until_stopped
from zuno.events import Event
from zuno.store import SessionRecord, StoreError

# The agent loop, the providers, the runtime and the live view are imported by the
# commands that run them: registering `run` and `resume` (and `zuno --help`) needs none.
if TYPE_CHECKING:
    from zuno.agent.loop import TurnOutcome
    from zuno.agent.providers import Provider
    from zuno.cli.headless_run import HeadlessOptions
    from zuno.config import PermissionMode
    from zuno.permissions import ApprovalAnswer, ApprovalDecision, ApprovalRequest, Approver
    from zuno.runtime import Runtime, SessionState
    from zuno.tools.question import Answer, Question, Questioner

__all__ = [
    "ResumeRefused",
    "move_session",
    "prompt_text",
    "resume",
    "resume_folder",
    "run",
    "stored_session",
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


class ResumeRefused(Exception):
    """A resume that cannot go ahead as asked (the folder), with what to do instead."""


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


def _first_line(text: str, width: int = 160) -> str:
    line = next((x for x in text.strip().splitlines() if x.strip()), "")
    return line if len(line) <= width else line[: width - 3] + "..."


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty()


def _open_runtime(workspace: Path, db: Path | None, yes: bool) -> Runtime:
    from zuno.cli.approvals import LearningApprover
    from zuno.cli.trust_cmds import offer_trust
    from zuno.config import ConfigError
    from zuno.permissions import ApproveAll, DenyAll
    from zuno.runtime import Runtime
    from zuno.tools.question import TerminalQuestioner

    interactive = _interactive()
    questioner: Questioner | None = TerminalQuestioner() if interactive else None
    learning = LearningApprover() if interactive and not yes else None
    approver: Approver = ApproveAll() if yes else learning or DenyAll()
    shared = _OneAtATime(approver, questioner)
    if interactive:
        # Asked once, before anything from the file is used; never without a terminal.
        offer_trust(workspace)
    from zuno.cli.headless import ExitStatus
    from zuno.store import StoreUnavailable

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


def _close_and_fail(rt: Runtime, message: str) -> NoReturn:
    """Close the runtime (its store) before exiting with ``message``."""
    rt.close()
    fail(message)


def _provider(model: str, rt: Runtime) -> Provider:
    from zuno.agent.providers import ProviderError, make_provider

    try:
        return make_provider(model, rt.config.providers)
    except ProviderError as exc:
        _close_and_fail(rt, str(exc))


async def _drive(
    rt: Runtime, state: SessionState, provider: Provider, prompt: str | None, steps: int | None
) -> TurnOutcome:
    from zuno.agent.loop import AgentLoop
    from zuno.cli.live import LiveView

    view = LiveView(rt)
    stop = view.watch(state)
    try:
        async with rt:
            loop = AgentLoop(rt, state, provider, max_steps=steps, on_text=view.text)
            try:
                outcome = await loop.run(prompt)
            finally:
                import anyio

                with anyio.CancelScope(shield=True):
                    await provider.aclose()
            await wait_for_own_jobs(rt)
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
    spent = _spent(rt, sid)
    kids += f"; {spent}" if spent else ""
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


def _spent(rt: Runtime, session_id: str) -> str:
    """The session's tokens and cost, child agents included ("" before any model reply)."""
    from zuno.budget import price_for, session_usage

    usage = session_usage(rt.store, session_id, price_of=lambda m: price_for(m, rt.config))
    return usage.describe() if usage.requests else ""


def _finish(
    rt: Runtime,
    state: SessionState,
    provider: Provider,
    prompt: str | None,
    steps: int | None,
    last_message: Path | None = None,
) -> None:
    from zuno.agent.loop import TurnStatus
    from zuno.mcp.errors import McpServerError

    try:
        outcome = run_until_stopped(_drive, rt, state, provider, prompt, steps)
    except McpServerError as exc:
        _close_and_fail(rt, str(exc))
    except Exception as exc:
        from zuno.cli.headless_run import startup_problem

        problem = startup_problem(exc)  # a missing rg: one line, the session closed
        if problem is None:
            raise
        _close_and_fail(rt, problem)
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
    from zuno.budget import Budget, BudgetError

    try:
        budget = Budget(max_usd, max_tokens)
        budget.check_model(model, rt.config)
    except BudgetError as exc:
        _close_and_fail(rt, str(exc))
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
    from zuno.runtime import UnknownAgent

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
    rt = _open_runtime(workspace, db, yes)
    try:
        settings = rt.agent_settings(agent)
        chosen = resolve_model(model, settings, rt.config)
    except (UnknownAgent, ProviderError) as exc:
        _close_and_fail(rt, str(exc))
    _set_budget(rt, chosen, max_budget, max_tokens_budget)
    provider = _provider(chosen, rt)
    title = _first_line(prompt, 80)
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
    from zuno.runtime import UnknownAgent, UnknownSession

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
    rt = _open_runtime(target, db, yes)
    try:
        state = open_waiting(rt, record.session_id, wait)
        if mode is not None:
            rt.set_mode(state, cast("PermissionMode", mode))
        chosen = resolve_model(model or record.model, state.agent, rt.config)
    except (UnknownSession, UnknownAgent, ProviderError, StoreError) as exc:
        _close_and_fail(rt, str(exc))
    history = load_history(rt.store, state.session_id)
    chatting = prompt is None and _interactive()  # on a terminal: the chat, in this session
    if prompt is None:
        last = history[-1] if history else None
        finished = last is None or (isinstance(last, AssistantMessage) and not last.tool_calls)
        if finished and not chatting:
            why = "has no conversation" if last is None else "ended with an answer"
            _close_and_fail(
                rt,
                f"session {state.session_id} {why}; say what to do next: "
                f'zuno resume {state.session_id} "PROMPT"',
            )
    _set_budget(rt, chosen, max_budget, max_tokens_budget)
    provider = _provider(chosen, rt)
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


def stored_session(prefix: str, db: Path | None) -> SessionRecord:
    """The stored session ``prefix`` names (read before the runtime: it decides the folder).

    Raises:
        UnknownSession: No session, or several, match ``prefix``.
        StoreError: The store cannot be read.
    """
    from zuno.cli.app import find_session
    from zuno.store import open_store

    store = open_store(db)
    try:
        return find_session(store, prefix)
    finally:
        store.close()


def resume_folder(
    session_id: str, home: Path, workspace: Path | None, move_to: Path | None
) -> Path:
    """The folder a resumed session works in: its own, unless ``--move-to`` names another.

    Raises:
        ResumeRefused: The folders given cannot be used, with what to give instead.
    """
    if workspace is not None and workspace.resolve() != home:
        if move_to is None:
            raise ResumeRefused(
                f"session {session_id} works in {home}, not {workspace.resolve()}: "
                f"`zuno resume {session_id}` continues it there from any folder; "
                f"`--move-to {workspace}` moves it (the model is told)"
            )
        if move_to.resolve() != workspace.resolve():
            raise ResumeRefused(
                "--workspace and --move-to name different folders: give only --move-to"
            )
    if move_to is not None:
        target = move_to.resolve()
        if not target.is_dir():
            raise ResumeRefused(f"--move-to {move_to}: not a folder")
        return target
    if not home.is_dir():
        raise ResumeRefused(
            f"the workspace of session {session_id}, {home}, is not a folder any more; "
            f"`zuno resume {session_id} --move-to DIR` continues it in another folder"
        )
    return home


def move_session(rt: Runtime, session_id: str, home: Path, target: Path) -> None:
    """Record that the session now works in ``target``, and say so to the person."""
    with rt.store.transaction() as db:
        db.execute(
            "UPDATE sessions SET workspace = ? WHERE session_id = ?", (str(target), session_id)
        )
    from rich.text import Text

    rt.events.emit(Event("session.moved", session_id, data={"from": str(home), "to": str(target)}))
    err.print(
        Text.assemble(
            ("moved: ", "yellow"),
            f"session {session_id} now works in {target} (it worked in {home}); the model is told.",
        ),
        highlight=False,
    )
