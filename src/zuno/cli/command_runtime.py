"""The runtime a command opens, the session its calls go to, and how they are dispatched.

A command's calls go to a named session (a unique prefix of its id is enough),
to a new one, or to the workspace's session of direct calls (:data:`DIRECT_CALLS`).
A session another live process holds is refused at once, or waited for with
``--wait``. Ctrl-C, SIGTERM or SIGHUP cancel a dispatch, settle what ran, and
exit; background jobs the command started are waited for before it exits.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

from zuno.cli.console import err
from zuno.cli.errors import UsageError, user_errors, warn_control_paths, warn_untrusted
from zuno.cli.signals import Stopped, run_until_stopped
from zuno.durability.store import SessionRecord, Store
from zuno.durability.store.errors import SessionBusy

# The runtime and the dispatcher (pydantic models, every tool) are imported when a
# command opens them: `zuno --help` needs neither.
if TYPE_CHECKING:
    from zuno.config.permission import PermissionMode
    from zuno.dispatch.dispatcher import CallRequest, CallResult
    from zuno.dispatch.session_state import SessionState
    from zuno.session.runtime import Runtime

__all__ = [
    "DIRECT_CALLS",
    "Where",
    "dispatch_now",
    "exit_for",
    "find_session",
    "open_waiting",
    "runtime",
    "wait_for_own_jobs",
]


@contextmanager
def runtime(workspace: Path, db: Path | None, yes: bool = False) -> Generator[Runtime]:
    from zuno.policy.approvals import ApproveAll
    from zuno.policy.terminal_approver import default_approver
    from zuno.session.runtime import Runtime

    with user_errors():
        rt = Runtime(
            workspace,
            db_path=db,
            approver=ApproveAll() if yes else default_approver(),
        )
    warn_untrusted(rt.config)
    warn_control_paths(rt)
    try:
        with user_errors():
            yield rt
    finally:
        rt.close()


def exit_for(results: list[CallResult]) -> None:
    """Exit 1 unless every call is ``ok`` and every command it ran exited with status 0."""
    if any(r.outcome.value != "ok" or _command_failed(r) for r in results):
        raise typer.Exit(1)


def _command_failed(result: CallResult) -> bool:
    """Whether a completed command ended with a non-zero status (its outcome is still ok)."""
    status = (result.data or {}).get("exit_status")
    return status is not None and status != 0


def dispatch_now(rt: Runtime, state: Any, requests: list[CallRequest]) -> list[CallResult]:
    """Dispatch from the command line; Ctrl-C, SIGTERM or SIGHUP cancel it, settle, and exit."""
    try:
        return run_until_stopped(_dispatch_and_settle, rt, state, requests)
    except KeyboardInterrupt as exc:
        code = exc.exit_code if isinstance(exc, Stopped) else 130
        err.print(
            f"\n[yellow]interrupted[/]: what ran is recorded in session {state.session_id} "
            f"(zuno show {state.session_id})."
        )
        raise typer.Exit(code) from None


async def _dispatch_and_settle(
    rt: Runtime, state: Any, requests: list[CallRequest]
) -> list[CallResult]:
    """Dispatch, then let background jobs this command started finish (Ctrl-C cancels them)."""
    async with rt:
        results = await rt.dispatch(state, requests)
        await wait_for_own_jobs(rt)
    return results


async def wait_for_own_jobs(rt: Runtime) -> None:
    """Before exiting, let the background jobs this process started finish."""
    running = rt.jobs.mine_running()
    if running:
        err.print(
            f"[dim]waiting for background job(s) {', '.join(running)} started by this "
            "command; Ctrl-C cancels them[/]"
        )
        for job_id in running:
            await rt.jobs.wait(job_id)


DIRECT_CALLS = "direct calls (zuno call, zuno batch)"
"""The title marking the session that a workspace's direct calls join."""


@dataclass(frozen=True, slots=True)
class Where:
    """The session a direct call goes to: named, new, or the workspace's direct-call session."""

    session: str | None
    new: bool
    agent: str
    wait: float = 0.0
    """Seconds to wait for a named session another live process holds."""
    mode: str | None = None
    """The permission mode of this command's calls (None: the session's)."""

    def open(self, rt: Runtime) -> SessionState:
        state = self._open(rt)
        # A person typed these calls: they need not `read` a file before changing it.
        state.by_person = True
        if self.mode is not None:
            # A direct call's mode is this command's: the next `zuno call` to the same
            # session is not silently in it.
            rt.set_mode(state, cast("PermissionMode", self.mode), remember=False)
        return state

    def _open(self, rt: Runtime) -> SessionState:
        if self.session is not None:
            if self.new:
                raise UsageError("give --session or --new-session, not both")
            return open_waiting(rt, find_session(rt.store, self.session).session_id, self.wait)
        if not self.new:
            latest = _direct_session(rt.store, str(rt.workspace), self.agent)
            if latest is not None:
                try:
                    return rt.open_session(latest)
                except SessionBusy:
                    pass  # a call still running holds it: this one gets a session of its own
        return rt.open_session(agent=self.agent, title=DIRECT_CALLS)


def open_waiting(rt: Runtime, session_id: str, wait: float) -> SessionState:
    """Open a stored session; while another live process holds it, wait up to ``wait``
    seconds (saying so on stderr), then give up with :class:`SessionBusy`."""
    try:
        return rt.open_session(session_id)
    except SessionBusy as exc:
        if wait <= 0:
            raise
        held = str(exc).split(": use --wait", 1)[0]
        err.print(
            f"zuno: {held}; waiting up to {wait:g} s for it",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    try:
        return rt.open_session(session_id, wait=wait)
    except SessionBusy as exc:
        raise SessionBusy(
            f"{str(exc).split(': use --wait', 1)[0]}; gave up after waiting {wait:g} s",
            exc.session_id,
            exc.owner,
            exc.expires_at,
        ) from None


def _direct_session(store: Store, workspace: str, agent: str) -> str | None:
    """The newest session of direct calls of this workspace and agent, if any."""
    rows = store.query(
        "SELECT session_id FROM sessions WHERE workspace = ? AND agent = ? AND title = ?"
        " AND model IS NULL AND parent_call_id IS NULL"
        " ORDER BY created_at DESC, session_id DESC LIMIT 1",
        (workspace, agent, DIRECT_CALLS),
    )
    return str(rows[0][0]) if rows else None


def find_session(store: Store, prefix: str) -> SessionRecord:
    """The session whose id is ``prefix`` or starts with it.

    Raises:
        UnknownSession: No session matches, or several do (they are named).
    """
    from zuno.session.lifecycle import UnknownSession

    record = store.get_session(prefix)
    if record is not None:
        return record
    matches = store.find_sessions(prefix)
    if not matches:
        raise UnknownSession(f"no session {prefix!r}; `zuno sessions --all` lists them")
    if len(matches) > 1:
        named = ", ".join(matches[:10]) + (
            f" and {len(matches) - 10} more" if len(matches) > 10 else ""
        )
        raise UnknownSession(
            f"the session prefix {prefix!r} is ambiguous: it matches {len(matches)} sessions "
            f"({named}); give more of the id"
        )
    record = store.get_session(matches[0])
    if record is None:
        raise UnknownSession(f"no session {prefix!r}; `zuno sessions --all` lists them")
    return record
