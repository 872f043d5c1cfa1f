"""``zuno submit`` and ``zuno worker``: a fleet of agent workers sharing one store.

``zuno submit PROMPT`` queues a session (it prints the session id); any
number of ``zuno worker`` processes, on any machine that reaches the store
(a ``postgresql://`` URL for several machines, a SQLite file for one), take
queued sessions and run them. See :mod:`zuno.fleet.worker`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from zuno.cli.agent_options import MaxBudgetOpt, MaxTokensBudgetOpt
from zuno.cli.app import app
from zuno.cli.errors import fail, user_errors, warn_untrusted
from zuno.cli.options import AgentOpt, Db, Json, ModeOpt, Workspace, Yes
from zuno.durability.store import open_store

# The configuration and the agent loop are imported by the commands that use them.
if TYPE_CHECKING:
    from zuno.config.agents import AgentSettings
    from zuno.config.loading import Config

__all__ = ["submit", "worker"]

_MODEL_HELP = (
    "PROVIDER:MODEL (openai:gpt-4o, NAME:MODEL for a provider in zuno.json). Default: the "
    "agent's model, else zuno.json's model (read now, in the workspace)."
)


def _agent_settings(config: Config, name: str) -> AgentSettings:
    from zuno.session.runtime import BUILTIN_AGENTS, UnknownAgent

    if name in config.agents:
        return config.agents[name]
    if name in BUILTIN_AGENTS:
        return BUILTIN_AGENTS[name]
    known = ", ".join(dict.fromkeys([*BUILTIN_AGENTS, *config.agents]))
    raise UnknownAgent(f"no agent named {name!r}; known agents: {known}")


@app.command()
def submit(
    prompt: Annotated[str, typer.Argument(help="What the agent should do.")],
    agent: AgentOpt = "build",
    model: Annotated[str | None, typer.Option("--model", "-m", help=_MODEL_HELP)] = None,
    max_steps: Annotated[
        int | None,
        typer.Option("--max-steps", min=1, max=1000, help="Model steps before it fails (50)."),
    ] = None,
    yes: Yes = False,
    mode: ModeOpt = None,
    max_budget: MaxBudgetOpt = None,
    max_tokens_budget: MaxTokensBudgetOpt = None,
    workspace: Workspace = Path("."),
    db: Db = None,
    json_: Json = False,
) -> None:
    """Queue PROMPT as a session for `zuno worker` to run; prints the session id.

    The workspace must be reachable at the same path by the workers. No one is
    asked anything while it runs: without --yes, calls that strict mode would
    ask about are denied.
    """
    from zuno.agent.loop import resolve_model
    from zuno.agent.providers import ProviderError
    from zuno.config.loading import load_config
    from zuno.fleet.worker import submit as queue

    with user_errors():
        if not workspace.is_dir():
            fail(f"the workspace {workspace} is not a folder")
        config = load_config(workspace.resolve())
        warn_untrusted(config)
        try:
            chosen = resolve_model(model, _agent_settings(config, agent), config)
        except ProviderError as exc:
            fail(str(exc))
        if max_budget is not None or max_tokens_budget is not None:
            from zuno.policy.budget import Budget, BudgetError

            try:  # a cap the worker could not keep is refused now, not when it runs
                Budget(max_budget, max_tokens_budget).check_model(chosen, config)
            except BudgetError as exc:
                fail(str(exc))
        store = open_store(db)
        try:
            session_id = queue(
                store,
                prompt,
                workspace=workspace,
                agent=agent,
                model=chosen,
                max_steps=max_steps,
                approve=yes,
                mode=mode,
                max_budget=max_budget,
                max_tokens_budget=max_tokens_budget,
            )
        finally:
            store.close()
    if json_:
        sys.stdout.write(json.dumps({"session_id": session_id, "state": "queued"}) + "\n")
        return
    sys.stdout.write(session_id + "\n")
    sys.stderr.write(f"queued {session_id} ({agent} on {chosen}); `zuno worker` runs it\n")


@app.command()
def worker(
    db: Db = None,
    lease: Annotated[
        float | None,
        typer.Option(
            "--lease",
            min=1.0,
            help="Seconds this worker's lease lasts without a heartbeat; after that another "
            "worker may take over its session (default: $ZUNO_LEASE_SECONDS, else 30).",
        ),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Run at most one session, then exit.")] = (
        False
    ),
    max_sessions: Annotated[
        int | None, typer.Option("--max-sessions", min=1, help="Exit after N sessions.")
    ] = None,
    idle_exit: Annotated[
        float | None,
        typer.Option("--idle-exit", min=0.0, help="Exit after S seconds with nothing to run."),
    ] = None,
) -> None:
    """Run queued sessions from the store, one at a time, until stopped.

    Takes the oldest queued session, or one whose worker's lease expired (that
    worker died: its session is resumed with the recovery notice; nothing it
    may have done is run again). SIGTERM or Ctrl-C: the session in hand goes
    back to the queue and the worker exits.
    """
    from zuno.durability.workers import shared_lease
    from zuno.fleet.worker import FleetWorker, WorkerCannotRun, WorkerStopped, short_worker

    if lease is not None:
        # Every lease of this process (the sessions' runtimes share the worker's) lasts as long.
        os.environ["ZUNO_LEASE_SECONDS"] = str(lease)
    with user_errors():
        store = open_store(db)
    try:
        with user_errors(), shared_lease(store) as held:
            fleet = FleetWorker(
                store,
                held,
                once=once,
                max_sessions=max_sessions,
                idle_exit=idle_exit,
                poll=min(1.0, held.lease_seconds / 3),
            )
            sys.stderr.write(
                f"worker {short_worker(fleet.worker_id)} ({fleet.worker_id}) started; "
                f"lease {held.lease_seconds:g} s\n"
            )
            try:
                ran = fleet.serve()
            except WorkerCannotRun as exc:
                fail(f"worker {short_worker(fleet.worker_id)} stopped: {exc}")
            except WorkerStopped as exc:
                sys.stderr.write(
                    f"worker {short_worker(fleet.worker_id)} stopped by {exc} after "
                    f"{fleet.ran} session(s)\n"
                )
                raise typer.Exit(128 + exc.signum) from None
            except Exception as exc:  # unrecoverable: one line (the details go to the log)
                logging.getLogger("zuno.fleet.worker").debug("the worker stopped", exc_info=True)
                fail(
                    f"worker {short_worker(fleet.worker_id)} stopped after {fleet.ran} "
                    f"session(s): {_one_line(exc)} (its session went back to the queue)"
                )
        sys.stderr.write(f"worker {short_worker(fleet.worker_id)}: {ran} session(s) run\n")
    finally:
        store.close()


def _one_line(exc: BaseException) -> str:
    """The first real error inside ``exc`` (exception groups unwrapped), as one line."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # pyright: ignore[reportUnknownMemberType]
        exc = exc.exceptions[0]  # pyright: ignore[reportUnknownMemberType,reportUnknownVariableType]
    text = " ".join(str(exc).split()) or type(exc).__name__  # pyright: ignore[reportUnknownArgumentType]
    return text if len(text) <= 300 else text[:297] + "..."
