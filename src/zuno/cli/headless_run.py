"""Running a turn for a program: ``zuno run --json`` and ``zuno resume --json``.

The events are written by :class:`~zuno.cli.headless.HeadlessWriter`; this
module opens the runtime and the session (a new one, or a stored one to
continue), runs the turn, and turns every way it can end into an ``end``
event and an exit status (:class:`~zuno.cli.headless.ExitStatus`). With
``--output-format json`` only the ``end`` object is written; with
``--output-last-message FILE`` the model's last message is also saved.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NoReturn, cast

import typer

from zuno.agent.loop import TurnOutcome, TurnStatus, resolve_model
from zuno.agent.providers import Provider, ProviderError, make_provider
from zuno.cli.headless import ExitStatus, HeadlessWriter
from zuno.cli.run_report import write_last_message
from zuno.cli.signals import Stopped, run_until_stopped
from zuno.config.loading import ConfigError
from zuno.config.permission import PermissionMode
from zuno.dispatch.session_state import SessionState
from zuno.durability.store import StoreError, StoreUnavailable
from zuno.policy.approvals import ApproveAll, DenyAll
from zuno.policy.budget import Budget, BudgetError
from zuno.session.lifecycle import UnknownSession
from zuno.session.runtime import Runtime, UnknownAgent

__all__ = [
    "HeadlessOptions",
    "OutputFormat",
    "resume_headless",
    "run_headless",
    "startup_problem",
]

OutputFormat = Literal["stream-json", "json"]
"""``stream-json``: one event per line as it happens; ``json``: the ``end`` object only."""


@dataclass(frozen=True, slots=True)
class HeadlessOptions:
    """The options of ``zuno run`` / ``zuno resume`` that a headless run uses."""

    model: str | None = None
    yes: bool = False
    max_steps: int | None = None
    db: Path | None = None
    mode: str | None = None
    max_budget: float | None = None
    max_tokens_budget: int | None = None
    output: OutputFormat = "stream-json"
    last_message: Path | None = None


def _say(message: str) -> None:
    """One diagnostic line on stderr (stdout holds only events)."""
    sys.stderr.write(f"zuno: {message}\n")
    sys.stderr.flush()


class _Ended(Exception):
    """The run ends here with ``status`` (the end event is written on the way out)."""

    def __init__(self, status: str, code: ExitStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def _usage(message: str) -> _Ended:
    return _Ended("usage_error", ExitStatus.USAGE, message)


def _found(
    exc: BaseException, kind: type[BaseException] | tuple[type[BaseException], ...]
) -> BaseException | None:
    """The exception of ``kind`` in ``exc``, also inside the exception groups of task groups."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:  # pyright: ignore[reportUnknownVariableType]
            found = _found(inner, kind)  # pyright: ignore[reportUnknownArgumentType]
            if found is not None:
                return found
    return None


def _store_unavailable(exc: BaseException) -> StoreUnavailable | None:
    found = _found(exc, StoreUnavailable)
    return found if isinstance(found, StoreUnavailable) else None


def startup_problem(exc: BaseException) -> str | None:
    """What a person must fix when a tool could not start (a missing rg, no sandbox), or None.

    Tools load when the agent first lists them, inside the turn's task group, so
    the error may come wrapped in exception groups.
    """
    from zuno.execution.ripgrep._locate import RipgrepUnavailable
    from zuno.execution.sandbox.policy import SandboxError

    found = _found(exc, (RipgrepUnavailable, SandboxError))
    return None if found is None else str(found)


@dataclass(slots=True)
class _Run:
    """What a run has opened so far (closed on the way out, whatever happened)."""

    options: HeadlessOptions
    writer: HeadlessWriter
    rt: Runtime | None = None

    def open(self, workspace: Path) -> Runtime:
        try:
            rt = Runtime(
                workspace,
                db_path=self.options.db,
                approver=ApproveAll() if self.options.yes else DenyAll(),
            )
        except StoreUnavailable as exc:
            raise _Ended("store_unavailable", ExitStatus.STORE_UNAVAILABLE, str(exc)) from None
        except (ConfigError, StoreError) as exc:
            raise _usage(str(exc)) from None
        except Exception as exc:  # a missing rg or sandbox: say what, never a traceback
            raise _usage(f"cannot start: {exc}") from None
        self.rt = rt
        for warning in (
            rt.config.untrusted_warning(),
            rt.control_paths.workspace_warning(rt.workspace),
        ):
            if warning:
                _say(warning)
        # No questioner: the question tool answers that no one can answer.
        setattr(rt, "questioner", None)  # noqa: B010
        return rt

    def model(self, rt: Runtime, state_agent: str, stored: str | None = None) -> str:
        """The model of the turn, with the budget set; a usage error when it cannot be used."""
        options = self.options
        try:
            chosen = resolve_model(
                options.model or stored, rt.agent_settings(state_agent), rt.config
            )
            if options.max_budget is not None or options.max_tokens_budget is not None:
                budget = Budget(options.max_budget, options.max_tokens_budget)
                budget.check_model(chosen, rt.config)
                rt.budget = budget
        except (UnknownAgent, ProviderError, BudgetError) as exc:
            raise _usage(str(exc)) from None
        return chosen

    def turn(self, state: SessionState, model: str, prompt: str | None) -> ExitStatus:
        rt = self.rt
        assert rt is not None
        try:
            provider = make_provider(model, rt.config.providers)
        except ProviderError as exc:
            raise _usage(str(exc)) from None
        self.writer.session(rt, state, model)
        stop = self.writer.watch(rt)
        try:
            outcome = run_until_stopped(
                _drive, rt, self.writer, state, provider, prompt, self.options.max_steps
            )
        finally:
            stop()
        if outcome.status is not TurnStatus.ANSWERED:
            _say(outcome.message)
        return self.writer.finish(outcome)


async def _drive(
    rt: Runtime,
    writer: HeadlessWriter,
    state: SessionState,
    provider: Provider,
    prompt: str | None,
    steps: int | None,
) -> TurnOutcome:
    from zuno.cli.agent_options import run_one_turn

    return await run_one_turn(rt, state, provider, prompt, steps, writer.text)


def _main(options: HeadlessOptions, body: Callable[[_Run], ExitStatus]) -> NoReturn:
    """Run ``body``; every way it ends becomes the ``end`` event and the exit status."""
    from zuno.integrations.mcp.errors import McpServerError

    sys.stdout.flush()
    writer = HeadlessWriter(sys.stdout.buffer, stream=options.output == "stream-json")
    run = _Run(options, writer)
    code: int
    # Anything printed by accident goes to stderr: stdout holds only event lines.
    with contextlib.redirect_stdout(sys.stderr):
        try:
            code = body(run)
        except _Ended as ended:
            code = ended.code
            _say(str(ended))
            writer.end(ended.status, code, str(ended))
        except KeyboardInterrupt as exc:
            code = exc.exit_code if isinstance(exc, Stopped) else ExitStatus.INTERRUPTED
            why = f"by {exc}" if isinstance(exc, Stopped) else "by Ctrl-C"
            sid = writer.session_id
            saved = f"; session {sid} is saved: `zuno resume {sid}` continues it" if sid else ""
            _say(f"interrupted {why}{saved}")
            writer.end("interrupted", code, f"interrupted {why}")
        except McpServerError as exc:
            code = ExitStatus.USAGE
            _say(str(exc))
            writer.end("usage_error", code, str(exc))
        except Exception as exc:
            unavailable = _store_unavailable(exc)
            problem = startup_problem(exc)
            if problem is not None:
                code = ExitStatus.USAGE
                _say(problem)
                writer.end("usage_error", code, problem)
            elif unavailable is None:
                writer.end("internal_error", 1, f"{type(exc).__name__}: {exc}")
                raise
            else:
                code = ExitStatus.STORE_UNAVAILABLE
                _say(str(unavailable))
                writer.end("store_unavailable", code, str(unavailable))
        finally:
            if run.rt is not None:
                with contextlib.suppress(Exception):  # a store that went away cannot close
                    run.rt.close()
    if options.last_message is not None and writer.session_id is not None:
        problem = write_last_message(options.last_message, writer.last_text)
        if problem is not None:
            _say(problem)
    raise typer.Exit(int(code))


def run_headless(prompt: str, *, agent: str, workspace: Path, options: HeadlessOptions) -> NoReturn:
    """``zuno run --json``: run one turn in a new session, writing its events; exits."""

    def body(run: _Run) -> ExitStatus:
        rt = run.open(workspace)
        chosen = run.model(rt, agent)
        first = next((x for x in prompt.strip().splitlines() if x.strip()), "")
        mode = cast("PermissionMode | None", options.mode)
        state = rt.open_session(agent=agent, model=chosen, title=first[:80], mode=mode)
        return run.turn(state, chosen, prompt)

    _main(options, body)


def resume_headless(
    session: str,
    prompt: str | None,
    *,
    workspace: Path | None,
    move_to: Path | None,
    wait: float,
    options: HeadlessOptions,
) -> NoReturn:
    """``zuno resume --json``: continue a stored session, writing its events; exits."""
    from zuno.agent.loop import load_history
    from zuno.agent.messages import AssistantMessage
    from zuno.cli.command_runtime import open_waiting
    from zuno.cli.resuming import ResumeRefused, move_session, resume_folder, stored_session
    from zuno.cli.transcript import moved_note

    def body(run: _Run) -> ExitStatus:
        try:
            record = stored_session(session, options.db)
            home = Path(record.workspace)
            target = resume_folder(record.session_id, home, workspace, move_to)
        except StoreUnavailable as exc:
            raise _Ended("store_unavailable", ExitStatus.STORE_UNAVAILABLE, str(exc)) from None
        except (ResumeRefused, UnknownSession, StoreError) as exc:
            raise _usage(str(exc)) from None
        rt = run.open(target)
        try:
            state = open_waiting(rt, record.session_id, wait)
            if options.mode is not None:
                rt.set_mode(state, cast("PermissionMode", options.mode))
        except (UnknownSession, UnknownAgent, StoreError) as exc:
            raise _usage(str(exc)) from None
        chosen = run.model(rt, state.agent_name, record.model)
        text = prompt
        if text is None:
            history = load_history(rt.store, state.session_id)
            last = history[-1] if history else None
            if last is None or (isinstance(last, AssistantMessage) and not last.tool_calls):
                why = "has no conversation" if last is None else "ended with an answer"
                raise _usage(
                    f"session {state.session_id} {why}; say what to do next: "
                    f'zuno resume {state.session_id} "PROMPT" --json'
                )
        if target != home:
            move_session(rt, state.session_id, home, target)
            note = moved_note(str(home), str(target))
            text = note if text is None else f"{note}\n\n{text}"
        return run.turn(state, chosen, text)

    _main(options, body)
