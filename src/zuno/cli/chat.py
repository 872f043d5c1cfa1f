"""``zuno chat`` (and ``zuno`` alone on a terminal): a conversation in one session.

The person types a prompt; the turn runs with the live view of ``zuno run``
(the model's text streams, calls show as they run, approvals and questions
are asked inline); then the next prompt is read, in the same session. Esc
interrupts the running turn: its calls are cancelled and settled as Ctrl-C
settles them, and the next prompt continues the session (the model is told
what happened to the calls it asked for). Ctrl-D or ``/exit`` leaves; Ctrl-C
during a turn ends the process as it does for ``zuno run``.

Prompts are read with prompt_toolkit: line editing, and a history kept in
Zuno's data folder. Lines starting with ``/`` are commands (:mod:`zuno.cli.slash`).
"""

from __future__ import annotations

import contextlib
import sys
import termios
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from zuno.cli.agent_options import (  # the same opening as zuno run's
    MaxStepsOpt,
    ModelOpt,
    close_and_fail,
    first_line,
    interactive,
    open_runtime,
    provider_for,
)
from zuno.cli.app import app
from zuno.cli.console import lazy_console
from zuno.cli.errors import fail
from zuno.cli.options import AgentOpt, Db, ModeOpt, Workspace, Yes

if TYPE_CHECKING:
    from zuno.agent.loop import TurnOutcome
    from zuno.agent.providers import Provider
    from zuno.config.permission import PermissionMode
    from zuno.dispatch.session_state import SessionState
    from zuno.session.runtime import Runtime

__all__ = ["Chat", "chat", "history_path", "run_chat"]

err = lazy_console(stderr=True, highlight=False, soft_wrap=True)

PROMPT = "> "


def history_path() -> Path:
    """Where typed prompts are kept between chats (Zuno's data folder)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("zuno")) / "prompt-history"


@dataclass
class Chat:
    """One interactive session: the runtime, the session (made at the first prompt) and model."""

    rt: Runtime
    agent: str
    model: str
    provider: Provider
    state: SessionState | None = None
    mode: PermissionMode | None = None
    max_steps: int | None = None
    db: Path | None = None
    """The store as given on the command line (None: the default)."""
    leaving: bool = False
    replaced: list[Provider] = field(default_factory=lambda: [])
    """Providers /model replaced: closed when the chat ends."""

    def session(self, prompt: str) -> SessionState:
        """The chat's session, opened at its first prompt (a chat left at once leaves none)."""
        if self.state is None:
            self.state = self.rt.open_session(
                agent=self.agent, model=self.model, title=first_line(prompt, 80), mode=self.mode
            )
        return self.state

    async def turn(self, prompt: str | None) -> TurnOutcome | None:
        """Run one turn with the live view; None when Esc interrupted it."""
        import anyio

        from zuno.agent.loop import AgentLoop
        from zuno.cli.escape_key import watch_escape
        from zuno.cli.live import LiveView

        state = self.session(prompt or "")
        view = LiveView(self.rt)
        stop = view.watch(state)
        outcome: TurnOutcome | None = None
        failure: Exception | None = None
        try:
            with anyio.CancelScope() as interrupt:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(watch_escape, interrupt.cancel)
                    loop = AgentLoop(
                        self.rt, state, self.provider, max_steps=self.max_steps, on_text=view.text
                    )
                    try:
                        outcome = await loop.run(prompt)
                    except Exception as exc:  # raised as it is, not in an exception group
                        failure = exc
                    finally:
                        tg.cancel_scope.cancel()  # stop watching for Esc
        finally:
            stop()
        if failure is not None:
            raise failure
        if outcome is None:
            err.print(
                "[yellow]interrupted[/] (Esc): the turn stopped, its running calls were "
                "cancelled and settled. Say what to do next."
            )
        else:
            self._after(outcome)
        return outcome

    def _after(self, outcome: TurnOutcome) -> None:
        from rich.text import Text

        from zuno.agent.loop import TurnStatus

        if outcome.status is not TurnStatus.ANSWERED:
            # Text, not markup: a message is the provider's words.
            err.print(Text.assemble(("zuno:", "bold red"), f" {outcome.message}"))
            return
        err.print(Text(f"done in {outcome.steps} step(s)", style="dim"))

    async def main(self, first_turn: bool, first_prompt: str | None) -> None:
        """Read prompts and run turns until Ctrl-D or /exit.

        ``first_turn``: run a turn before the first prompt is read (a resumed turn the
        model had not finished, with ``first_prompt`` when there is one).
        """
        from prompt_toolkit import PromptSession
        from prompt_toolkit.completion import WordCompleter
        from prompt_toolkit.history import FileHistory

        from zuno.cli.command_runtime import wait_for_own_jobs
        from zuno.cli.slash import COMMANDS, run_command

        path = history_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        session: PromptSession[str] = PromptSession(
            history=FileHistory(str(path)),
            completer=WordCompleter([f"/{name}" for name in COMMANDS], sentence=True),
            complete_while_typing=False,
        )
        async with self.rt:
            try:
                if first_turn:
                    await self.turn(first_prompt)
                err.print("[dim]Esc interrupts a turn; /help lists commands; Ctrl-D leaves.[/]")
                while not self.leaving:
                    try:
                        line = await session.prompt_async(PROMPT)
                    except KeyboardInterrupt:
                        continue  # Ctrl-C at the prompt clears the line
                    except EOFError:
                        break
                    text = line.strip()
                    if not text:
                        continue
                    if text.startswith("/"):
                        await run_command(self, text)
                        continue
                    await self.turn(text)
                await wait_for_own_jobs(self.rt)
            finally:
                import anyio

                with anyio.CancelScope(shield=True):
                    for provider in [*self.replaced, self.provider]:
                        await provider.aclose()


def run_chat(chat_: Chat, *, first_turn: bool = False, first_prompt: str | None = None) -> None:
    """Run the chat to its end; the terminal's mode is restored whatever happens."""
    from zuno.cli.signals import Stopped, run_until_stopped
    from zuno.integrations.mcp.errors import McpServerError

    saved = _terminal_mode()
    try:
        run_until_stopped(chat_.main, first_turn, first_prompt)
    except McpServerError as exc:
        close_and_fail(chat_.rt, str(exc))
    except KeyboardInterrupt as exc:
        why = f" by {exc}" if isinstance(exc, Stopped) else ""
        sid = chat_.state.session_id if chat_.state else None
        saved_note = (
            f" Session [bold cyan]{sid}[/] is saved; `zuno resume {sid}` continues it."
            if sid
            else ""
        )
        err.print(f"\n[yellow]interrupted[/]{why}.{saved_note}")
        chat_.rt.close()
        raise typer.Exit(exc.exit_code if isinstance(exc, Stopped) else 130) from None
    finally:
        _restore_terminal(saved)
    sid = chat_.state.session_id if chat_.state else None
    chat_.rt.close()
    if sid:
        err.print(f"Session [bold cyan]{sid}[/] is saved; `zuno resume {sid}` continues it.")


def _terminal_mode() -> list[Any] | None:
    try:
        return termios.tcgetattr(sys.stdin.fileno())
    except (termios.error, OSError, ValueError):
        return None


def _restore_terminal(saved: list[Any] | None) -> None:
    if saved is None:
        return
    with contextlib.suppress(termios.error, OSError, ValueError):
        termios.tcsetattr(sys.stdin.fileno(), termios.TCSANOW, saved)


@app.command()
def chat(
    agent: AgentOpt = "build",
    model: ModelOpt = None,
    yes: Yes = False,
    mode: ModeOpt = None,
    max_steps: MaxStepsOpt = None,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """An interactive session on a terminal: prompts, follow-ups, Esc to interrupt a turn.

    `zuno` alone on a terminal is the same. Type /help in it for its commands.
    """
    from typing import cast

    from zuno.agent.loop import resolve_model
    from zuno.agent.providers import ProviderError
    from zuno.session.runtime import UnknownAgent

    if not interactive():
        fail("zuno chat needs a terminal; for one prompt without one: zuno run PROMPT")
    rt = open_runtime(workspace, db, yes)
    try:
        settings = rt.agent_settings(agent)
        chosen = resolve_model(model, settings, rt.config)
    except (UnknownAgent, ProviderError) as exc:
        close_and_fail(rt, str(exc))
    provider = provider_for(chosen, rt)
    chosen_mode = cast("PermissionMode | None", mode)
    run_chat(Chat(rt, agent, chosen, provider, mode=chosen_mode, max_steps=max_steps, db=db))
