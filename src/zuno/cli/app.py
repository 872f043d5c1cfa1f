"""The ``zuno`` command."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Generator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from zuno.cli.signals import Stopped, run_until_stopped
from zuno.config import ConfigError, config_schema, load_config
from zuno.dispatch import CallRequest, CallResult
from zuno.permissions import ApproveAll, default_approver
from zuno.runtime import Runtime, UnknownAgent, UnknownSession
from zuno.store import StoreError, open_store

__all__ = ["app", "main"]

app = typer.Typer(
    name="zuno",
    help="Zuno: the tool runtime for coding agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False)

Workspace = Annotated[
    Path,
    typer.Option("--workspace", "-w", help="The workspace folder (default: the current folder)."),
]
Db = Annotated[
    Path | None,
    typer.Option(
        "--db",
        help="The store: a SQLite file, or postgresql://USER@HOST/DB "
        "(default: $ZUNO_DB, else zuno.db in the data folder).",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print JSON for programs.")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Approve what strict mode would ask.")]
SessionOpt = Annotated[
    str | None, typer.Option("--session", "-s", help="Append to this session (default: a new one).")
]
AgentOpt = Annotated[str, typer.Option("--agent", "-a", help="The agent whose tools are active.")]


class _UsageError(Exception):
    pass


def fail(message: str, code: int = 2) -> NoReturn:
    # One line however long (scripts grep it), and the message is never read as markup.
    err.print(f"[bold red]zuno:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def user_errors() -> Generator[None]:
    """Turn the errors a user can act on into one clear line, never a traceback."""
    from zuno.mcp.errors import McpServerError
    from zuno.ripgrep import RipgrepUnavailable
    from zuno.sandbox import SandboxError

    try:
        yield
    except (
        ConfigError,
        UnknownSession,
        UnknownAgent,
        _UsageError,
        RipgrepUnavailable,
        SandboxError,
        McpServerError,
        StoreError,
    ) as exc:
        fail(str(exc).strip("'\""))


_warned: set[str] = set()


def warn_untrusted(config: Any) -> None:
    """Say once per process what an untrusted workspace ``zuno.json`` tried to widen."""
    warning = config.untrusted_warning()
    if warning and warning not in _warned:
        _warned.add(warning)
        err.print(
            f"[yellow]zuno:[/] {escape(warning)}", markup=True, highlight=False, soft_wrap=True
        )


@contextmanager
def runtime(workspace: Path, db: Path | None, yes: bool = False) -> Generator[Runtime]:
    with user_errors():
        rt = Runtime(
            workspace,
            db_path=db,
            approver=ApproveAll() if yes else default_approver(),
        )
    warn_untrusted(rt.config)
    try:
        with user_errors():
            yield rt
    finally:
        rt.close()


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def _exit_for(results: list[CallResult]) -> None:
    """Exit 1 unless every call is ``ok`` and every command it ran exited with status 0."""
    if any(r.outcome.value != "ok" or _command_failed(r) for r in results):
        raise typer.Exit(1)


def _command_failed(result: CallResult) -> bool:
    """Whether a completed command ended with a non-zero status (its outcome is still ok)."""
    status = (result.data or {}).get("exit_status")
    return status is not None and status != 0


def _live_events(rt: Runtime) -> Callable[[], None]:
    """Show approvals and blocked calls as they happen (on stderr)."""

    def show(event: Any) -> None:
        if event.kind == "dispatch.blocked":
            err.print(
                f"[yellow]blocked[/] {event.data['tool']}: {event.data['block_kind']}",
                markup=True,
            )
        elif event.kind == "approval.decided":
            err.print(f"[dim]approval for {event.data['tool']}: {event.data['decision']}[/]")

    return rt.events.subscribe(show)


def _dispatch_now(rt: Runtime, state: Any, requests: list[CallRequest]) -> list[CallResult]:
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


@app.command()
def tools(
    agent: AgentOpt = "build",
    json_: Json = False,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """List the active tools with their effect, replay and concurrency."""
    from zuno.cli.render import print_surface, surface_rows

    with runtime(workspace, db) as rt:
        surface = rt.surface(agent)
        if json_:
            _print_json(surface_rows(surface))
        else:
            print_surface(out, surface, agent)


def _parse_args_json(text: str | None) -> dict[str, Any] | str:
    # The dispatcher parses the text, so bad JSON becomes a recorded blocked call.
    if text is None:
        return {}
    if text != "-":
        return text
    # Bytes that are not UTF-8 reach the dispatcher (as surrogates) and are refused there.
    return sys.stdin.buffer.read().decode("utf-8", "surrogateescape")


@app.command()
def call(
    tool: Annotated[str, typer.Argument(help="The tool to call.")],
    args_json: Annotated[
        str | None,
        typer.Argument(metavar="[ARGS_JSON]", help="Arguments as a JSON object ('-' reads stdin)."),
    ] = None,
    session: SessionOpt = None,
    agent: AgentOpt = "build",
    yes: Yes = False,
    json_: Json = False,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """Run one call through the whole pipeline (exit status 1 unless its outcome is ok)."""
    request = CallRequest(tool, _parse_args_json(args_json))
    _step(workspace, db, yes, session, agent, json_, [request], one=True)


@app.command()
def batch(
    file: Annotated[
        Path, typer.Argument(help='A JSON list of {"tool": ..., "args": {...}} ("-" reads stdin).')
    ],
    session: SessionOpt = None,
    agent: AgentOpt = "build",
    yes: Yes = False,
    json_: Json = False,
    workspace: Workspace = Path("."),
    db: Db = None,
) -> None:
    """Dispatch one model step made of several calls (exit status 1 unless all are ok)."""
    data = b""
    try:
        data = sys.stdin.buffer.read() if str(file) == "-" else file.read_bytes()
        items = json.loads(data.decode("utf-8"))
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}")
    except UnicodeDecodeError as exc:
        name = "standard input" if str(file) == "-" else str(file)
        fail(
            f"{name} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): "
            "save it as UTF-8"
        )
    except json.JSONDecodeError as exc:
        fail(f"{file} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})")
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and isinstance(i.get("tool"), str)
        for i in items  # type: ignore[union-attr]
    ):
        fail(
            f"{file} must hold a JSON list of objects like "
            '{"tool": "read", "args": {"path": "x"}}'
        )
    requests = [
        CallRequest(item["tool"], item.get("args"), item.get("id"))  # type: ignore[index,union-attr]
        for item in items  # type: ignore[union-attr]
    ]
    _step(workspace, db, yes, session, agent, json_, requests, one=False)


def _step(
    workspace: Path,
    db: Path | None,
    yes: bool,
    session: str | None,
    agent: str,
    json_: bool,
    requests: list[CallRequest],
    *,
    one: bool,
) -> None:
    """Dispatch one step for ``call`` (one=True: its result alone) or ``batch``, print, exit."""
    from zuno.cli.render import print_result

    with runtime(workspace, db, yes) as rt:
        state = rt.open_session(session, agent=agent)
        if not json_:
            _live_events(rt)
        results = _dispatch_now(rt, state, requests)
        if json_:
            _print_json(results[0].as_dict() if one else [r.as_dict() for r in results])
        else:
            for result in results:
                print_result(out, result)
            sys.stdout.flush()
            err.print(f"[dim]session {state.session_id}[/]")
        _exit_for(results)


@app.command()
def sessions(json_: Json = False, db: Db = None, workspace: Workspace = Path(".")) -> None:
    """List sessions, newest first."""
    from zuno.cli.render import print_sessions

    with user_errors():
        store = open_store(db, migrate=False)  # reads: never changes the schema
    try:
        records = store.list_sessions()
        if json_:
            _print_json([s.as_dict() for s in records])
        else:
            print_sessions(out, records)
    finally:
        store.close()


@app.command()
def show(
    session: Annotated[str, typer.Argument(help="A session id (a unique prefix is enough).")],
    json_: Json = False,
    db: Db = None,
    workspace: Workspace = Path("."),
) -> None:
    """The transcript of a session, from the store."""
    from zuno.cli.render import calls_not_run, print_transcript
    from zuno.recovery import last_notice, pending_notice, settle_interrupted

    with user_errors():
        store = open_store(db, migrate=False)  # reads: never changes the schema
    try:
        record = store.get_session(session)
        if record is None:
            matches = store.find_sessions(session)
            if len(matches) != 1:
                fail(f"no session {session!r}; `zuno sessions` lists them")
            record = store.get_session(matches[0])
            assert record is not None
        # A store that needs an upgrade is read as it is, through a read-only
        # connection: nothing is settled or recorded.
        current = store.migration_needed is None
        if current:
            settle_interrupted(store, record.session_id)
        else:
            err.print(store.migration_needed, style="dim", markup=False, highlight=False)
        calls = store.calls(record.session_id)
        events = store.events(record.session_id)
        not_run = calls_not_run(events, calls)
        children = store.child_sessions(record.session_id)
        notice = pending_notice(store, record.session_id) if current else None
        conversation = [
            {"role": role, "text": body.get("text") or body.get("content") or ""}
            for role, body in store.messages(record.session_id)
        ]
        if json_:
            _print_json(
                {
                    **record.as_dict(),
                    "calls": [c.as_dict() for c in calls],
                    "not_run": [n.as_dict() for n in not_run],
                    "events": [e.as_dict() for e in events],
                    "children": [c.session_id for c in children],
                    "messages": conversation,
                    "recovery": notice.as_dict() if notice else None,
                    "last_recovery_notice": (
                        last_notice(store, record.session_id) if current else None
                    ),
                }
            )
        else:
            print_transcript(out, record, calls, children, not_run)
            answers = [m["text"] for m in conversation if m["role"] == "assistant" and m["text"]]
            if answers:
                out.print("\n[bold]final answer:[/]", markup=True)
                out.print(answers[-1], markup=False)
            if notice is not None:
                out.print()
                out.print(notice.text, markup=False, style="magenta")
    finally:
        store.close()


@app.command()
def doctor(workspace: Workspace = Path("."), db: Db = None, json_: Json = False) -> None:
    """Check what Zuno needs: rg, the store, the configuration files."""
    from zuno.doctor import diagnose

    report = diagnose(workspace, db)
    if json_:
        _print_json(report)
        return
    for line in _doctor_lines(report):
        out.print(line, markup=False, highlight=False)
    if not report.get("ok", False):
        raise typer.Exit(1)


def _doctor_lines(report: dict[str, Any]) -> list[str]:
    """The doctor's report as a person reads it (``--json`` has every field)."""
    rg = report.get("rg", {})
    found = f"{rg.get('version')} at {rg.get('path')}" if "path" in rg else None
    lines = [
        f"rg:          {found or 'MISSING: ' + str(rg.get('error'))}",
        f"store:       {report.get('store')}",
    ]
    for path, state in report.get("config_files", {}).items():
        lines.append(f"config:      {path} ({state})")
    if "config_error" in report:
        lines.append(f"config:      ERROR: {report['config_error']}")
    trust = report.get("workspace_trust")
    if trust and trust.get("state") != "no workspace file":
        ignored: list[str] = trust.get("ignored") or []
        detail = f"; ignored: {', '.join(ignored)} (zuno trust honours them)" if ignored else ""
        lines.append(f"trust:       {trust['file']} {trust['state']}{detail}")
    if "permission_mode" in report:
        lines.append(f"permission:  {report['permission_mode']} mode")
    sandbox = report.get("sandbox")
    if sandbox:
        chosen = sandbox.get("selected") or "none"
        network = "on" if sandbox.get("network") else "off"
        lines.append(
            f"sandbox:     {chosen} (asked: {sandbox.get('kind')}), mode {sandbox.get('mode')}, "
            f"network {network}"
        )
        if sandbox.get("error"):
            lines.append(f"             ERROR: {sandbox['error']}")
        for backend in sandbox.get("backends", []):
            state = "available" if backend.get("available") else "unavailable"
            lines.append(f"             {backend['name']}: {state} ({backend.get('detail')})")
    lines.append("ok" if report.get("ok") else "NOT OK: see the lines above")
    return lines


@config_app.command("schema")
def config_schema_command() -> None:
    """Print the JSON Schema of zuno.json."""
    _print_json(config_schema())


@config_app.command("show")
def config_show(workspace: Workspace = Path(".")) -> None:
    """Print the effective configuration (user file, then workspace file)."""
    with user_errors():
        config = load_config(workspace.resolve())
    warn_untrusted(config)
    _print_json({"sources": config.sources, "config": config.model_dump(mode="json")})


def main() -> None:
    """Entry point of the console script."""
    # Undecodable bytes in arguments arrive as surrogates; echoing them back
    # must not end the command.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")  # pyright: ignore[reportAttributeAccessIssue]
    app()
