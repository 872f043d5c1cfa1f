"""The ``zuno`` command."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Generator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, cast

import typer

from zuno.cli.signals import Stopped, run_until_stopped
from zuno.durability.store import SessionRecord, Store, StoreError, open_store
from zuno.durability.store.errors import SessionBusy

# The runtime, the configuration and the dispatcher (pydantic models, every tool)
# are imported by the commands that use them: `zuno --help` needs none of them.
if TYPE_CHECKING:
    from rich.console import Console

    from zuno.config.loading import PermissionMode
    from zuno.dispatch.dispatcher import CallRequest, CallResult
    from zuno.integrations.mcp.errors import McpServerError
    from zuno.session.runtime import Runtime, SessionState

__all__ = ["app", "escape", "lazy_console", "main", "only", "prebuild"]

app = typer.Typer(
    name="zuno",
    help="Zuno: the tool runtime for coding agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Inspect the configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")


def _print_version(wanted: bool) -> None:
    if wanted:
        from zuno.core.installed import installed_version

        sys.stdout.write(f"zuno {installed_version()}\n")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: bool = typer.Option(
        False,
        "--version",
        help="Print Zuno's version and exit.",
        is_eager=True,
        callback=_print_version,
    ),
) -> None:
    """Zuno: the tool runtime for coding agents."""


class _LazyConsole:
    """A rich :class:`~rich.console.Console` made when first used.

    Importing rich's console takes tens of milliseconds; ``zuno --help`` and a
    command that fails before printing should not pay for it.
    """

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


def lazy_console(**options: Any) -> Console:
    """A console with these ``Console(...)`` options, built on first use."""
    return cast("Console", _LazyConsole(**options))


def escape(text: str) -> str:
    """``text`` with rich markup escaped (:func:`rich.markup.escape`, imported on use)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


out = lazy_console(highlight=False, soft_wrap=True)
err = lazy_console(stderr=True, highlight=False)

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
    str | None,
    typer.Option(
        "--session",
        "-s",
        help="Append to this session (default: the workspace's session of direct calls).",
    ),
]
NewSession = Annotated[
    bool,
    typer.Option("--new-session", help="Start a new session of direct calls for this workspace."),
]

WaitOpt = Annotated[
    float,
    typer.Option(
        "--wait",
        min=0,
        metavar="SECONDS",
        help="If another live process holds the session, wait up to SECONDS for it "
        "(default: refuse at once).",
    ),
]

StreamOpt = Annotated[
    bool,
    typer.Option(
        "--stream",
        help="Copy a running command's output to stderr as it comes (the result printed "
        "at the end stays the bounded one).",
    ),
]

DIRECT_CALLS = "direct calls (zuno call, zuno batch)"
"""The title marking the session that a workspace's direct calls join."""
AgentOpt = Annotated[str, typer.Option("--agent", "-a", help="The agent whose tools are active.")]

MODE_NAMES = ("plan", "accept-edits", "strict", "permissive")
"""The permission modes (zuno.policy.permissions.MODES, named here so that --help imports no
models).
"""


def check_mode_name(value: str | None) -> str | None:
    """A ``--mode`` value, refused with the list of modes when it is none of them."""
    if value is not None and value not in MODE_NAMES:
        raise typer.BadParameter(f"{value!r} is not a mode; choose {', '.join(MODE_NAMES)}")
    return value


ModeOpt = Annotated[
    str | None,
    typer.Option(
        "--mode",
        callback=check_mode_name,
        metavar="MODE",
        help="The permission mode: plan (reads, questions and plan updates only), "
        "accept-edits (file edits in the workspace unasked), strict, permissive. "
        "Default: the session's stored mode, else permission.mode of zuno.json.",
    ),
]


class _UsageError(Exception):
    pass


def fail(message: str, code: int = 2) -> NoReturn:
    # One line however long (scripts grep it), and the message is never read as markup.
    err.print(f"[bold red]zuno:[/] {escape(message)}", markup=True, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def user_errors() -> Generator[None]:
    """Turn the errors a user can act on into one clear line, never a traceback."""
    from zuno.config.loading import ConfigError
    from zuno.execution.ripgrep import RipgrepUnavailable
    from zuno.execution.sandbox import SandboxError
    from zuno.integrations.mcp.errors import McpServerError
    from zuno.session.runtime import UnknownAgent, UnknownSession

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
        fail(error_text(exc))


def error_text(exc: BaseException) -> str:
    """An exception's message as the user reads it.

    Only a KeyError's own quotes (``str`` shows its argument's repr) are left
    out: a message that ends in a quoted value keeps its closing quote.
    """
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)


_warned: set[str] = set()


def warn_untrusted(config: Any) -> None:
    """Say once per process what an untrusted workspace ``zuno.json`` tried to widen."""
    warning = config.untrusted_warning()
    if warning and warning not in _warned:
        _warned.add(warning)
        err.print(
            f"[yellow]zuno:[/] {escape(warning)}", markup=True, highlight=False, soft_wrap=True
        )


def warn_control_paths(rt: Any) -> None:
    """Say once per process when the workspace holds Zuno's own folders (config, data)."""
    warning = rt.control_paths.workspace_warning(rt.workspace)
    if warning and warning not in _warned:
        _warned.add(warning)
        err.print(
            f"[yellow]zuno:[/] {escape(warning)}", markup=True, highlight=False, soft_wrap=True
        )


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
    from zuno.cli.plain import (
        SURFACE_HEADERS,
        is_plain,
        surface_json,
        surface_notes,
        surface_table_rows,
        write_table,
    )

    with runtime(workspace, db) as rt:
        surface = rt.surface(agent)
        failures: dict[str, McpServerError] = {}
        if rt.config.mcp.servers:
            # The configured servers' tools join the surface once connected, as for `call`.
            surface, failures = run_until_stopped(_connected_surface, rt, agent)
        if json_:
            _print_json(surface_json(surface, agent, failures))
        elif is_plain(sys.stdout):  # the lines rich would print, without importing it
            rows = surface_table_rows(surface)
            title = f"Active tools for agent {agent!r}"
            notes = surface_notes(surface, rows, failures)
            write_table(sys.stdout, title, SURFACE_HEADERS, rows, notes)
        else:
            from zuno.cli.render import print_surface

            print_surface(out, surface, agent, failures)


async def _connected_surface(rt: Runtime, agent: str) -> tuple[Any, dict[str, McpServerError]]:
    """The agent's surface with the configured MCP servers connected, and those that failed."""
    async with rt:
        return rt.surface(agent), dict(rt.mcp_failures)


def _parse_args_json(text: str | None) -> dict[str, Any] | str:
    # The dispatcher parses the text, so bad JSON becomes a recorded blocked call.
    if text is None:
        return {}
    if text != "-":
        return text
    # Bytes that are not UTF-8 reach the dispatcher (as surrogates) and are refused there.
    return _read_stdin().decode("utf-8", "surrogateescape")


_BATCH_KEYS = frozenset({"tool", "args", "arguments", "id"})


def _batch_item(file: Path, n: int, item: dict[str, Any]) -> CallRequest:
    """One batch entry as a call: ``args`` (or ``arguments``, as MCP names it), never guessed."""
    unknown = sorted(set(item) - _BATCH_KEYS)
    if unknown:
        fail(
            f"{file}: entry {n} has unknown key(s) {', '.join(map(repr, unknown))}; "
            'each entry is {"tool": NAME, "args": {...}, "id": OPTIONAL}'
        )
    if "args" in item and "arguments" in item:
        fail(f'{file}: entry {n} has both "args" and "arguments"; keep one')
    from zuno.dispatch.dispatcher import CallRequest

    return CallRequest(item["tool"], item.get("args", item.get("arguments")), item.get("id"))


def _read_stdin() -> bytes:
    """All of standard input; one clear line (exit 2) when there is none to read."""
    if sys.stdin is None:  # pyright: ignore[reportUnnecessaryComparison]  # closed: `<&-`
        fail("standard input is closed: give the JSON as an argument, or pipe it in")
    return sys.stdin.buffer.read()


@app.command()
def call(
    tool: Annotated[str, typer.Argument(help="The tool to call.")],
    args_json: Annotated[
        str | None,
        typer.Argument(metavar="[ARGS_JSON]", help="Arguments as a JSON object ('-' reads stdin)."),
    ] = None,
    session: SessionOpt = None,
    new_session: NewSession = False,
    agent: AgentOpt = "build",
    yes: Yes = False,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            callback=check_mode_name,
            metavar="MODE",
            help="The permission mode for this command's calls (not stored with the session).",
        ),
    ] = None,
    json_: Json = False,
    workspace: Workspace = Path("."),
    db: Db = None,
    wait: WaitOpt = 0.0,
    stream: StreamOpt = False,
) -> None:
    """Run one call through the whole pipeline (exit status 1 unless its outcome is ok).

    A command's output shows as it runs: its last lines at the bottom of a terminal,
    or all of it on stderr with --stream.
    """
    from zuno.dispatch.dispatcher import CallRequest

    request = CallRequest(tool, _parse_args_json(args_json))
    where = _Where(session, new_session, agent, wait, mode)
    _step(workspace, db, yes, where, json_, [request], one=True, stream=stream)


@app.command()
def batch(
    file: Annotated[
        Path, typer.Argument(help='A JSON list of {"tool": ..., "args": {...}} ("-" reads stdin).')
    ],
    session: SessionOpt = None,
    new_session: NewSession = False,
    agent: AgentOpt = "build",
    yes: Yes = False,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            callback=check_mode_name,
            metavar="MODE",
            help="The permission mode for this step's calls (not stored with the session).",
        ),
    ] = None,
    json_: Json = False,
    workspace: Workspace = Path("."),
    db: Db = None,
    wait: WaitOpt = 0.0,
    stream: StreamOpt = False,
) -> None:
    """Dispatch one model step made of several calls (exit status 1 unless all are ok).

    Commands' output shows as they run, as for ``zuno call`` (--stream: all of it on stderr).
    """
    data = b""
    try:
        data = _read_stdin() if str(file) == "-" else file.read_bytes()
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
    requests = [_batch_item(file, n, item) for n, item in enumerate(items, 1)]  # type: ignore[arg-type]
    where = _Where(session, new_session, agent, wait, mode)
    _step(workspace, db, yes, where, json_, requests, one=False, stream=stream)


@dataclass(frozen=True, slots=True)
class _Where:
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
                raise _UsageError("give --session or --new-session, not both")
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


def _print_json_example(rt: Runtime, result: CallResult, given: object) -> None:
    """Arguments given as plain text: one line with the JSON form they take."""
    from zuno.dispatch.arguments import example_arguments

    tool = rt.registry.get(result.tool)
    if result.block_kind is None or tool is None or not isinstance(given, str):
        return
    example = example_arguments(tool, given)
    if example is not None:
        form = f"zuno call {result.tool} '{example}'"
        err.print(
            f"zuno: the arguments are one JSON object, such as: {form}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _step(
    workspace: Path,
    db: Path | None,
    yes: bool,
    where: _Where,
    json_: bool,
    requests: list[CallRequest],
    *,
    one: bool,
    stream: bool = False,
) -> None:
    """Dispatch one step for ``call`` (one=True: its result alone) or ``batch``, print, exit."""
    from zuno.cli.call_output import follow_calls
    from zuno.cli.plain import is_plain, write_result

    with runtime(workspace, db, yes) as rt:
        state = where.open(rt)
        rt.load_tools(r.tool for r in requests)  # no rg or sandbox: one line, not a traceback
        if not json_:
            _live_events(rt)
        unasked = _denied_unasked(rt)
        following = follow_calls(rt, requests, stream=stream)
        try:
            results = _dispatch_now(rt, state, requests)
        finally:
            following()
        if json_:
            _print_json(results[0].as_dict() if one else [r.as_dict() for r in results])
        else:
            plain = is_plain(sys.stdout)  # the output as the tool wrote it, without rich
            for result in results:
                if plain:
                    write_result(sys.stdout, result)
                else:
                    from zuno.cli.render import print_result

                    print_result(out, result)
            sys.stdout.flush()
        for result in results:
            if result.call_id in unasked:
                _print_how_to_allow(rt, result.tool, requests[result.index].arguments)
            _print_json_example(rt, result, requests[result.index].arguments)
        if not json_:
            if is_plain(sys.stderr):
                sys.stderr.write(f"session {state.session_id}\n")
            else:
                err.print(f"[dim]session {state.session_id}[/]")
        _exit_for(results)


def _denied_unasked(rt: Runtime) -> set[str]:
    """The ids of the calls that will be denied because no one can be asked (no terminal).

    Filled as the approvals are decided. A call a deny rule refuses is never
    put to the approver, so it is not among them: ``--yes`` would not help it.
    """
    from zuno.policy.approvals import DenyAll

    denied: set[str] = set()
    if not isinstance(rt.approver, DenyAll):
        return denied

    def note(event: Any) -> None:
        if event.kind == "approval.decided" and event.data.get("decision") == "deny":
            denied.add(str(event.call_id))

    rt.events.subscribe(note)
    return denied


def rule_file(rt: Runtime) -> Path:
    """The file where an allow rule takes effect for this runtime's workspace.

    The workspace's ``zuno.json`` only when it is trusted (an untrusted one may
    only narrow, so an allow rule there would be ignored); the user's own file
    otherwise.
    """
    from zuno.config.loading import CONFIG_NAME, user_config_path
    from zuno.config.trust import TrustState

    if rt.config.workspace_trust == TrustState.TRUSTED:
        return rt.workspace / CONFIG_NAME
    return user_config_path()


def _print_how_to_allow(rt: Runtime, tool: str, arguments: Any) -> None:
    """One line on stderr: how a call refused for want of an approver can be allowed.

    (The call's result is what a model would read; this is for the person at the shell.)
    """
    pattern = "*"
    found = rt.registry.get(tool)
    argument = found.rule_argument if found is not None else None
    if isinstance(arguments, str):  # `zuno call` hands the dispatcher the text as given
        try:
            arguments = json.loads(arguments)
        except ValueError:
            arguments = None
    if argument is not None and isinstance(arguments, dict):
        value = cast(dict[str, Any], arguments).get(argument)
        pattern = value if isinstance(value, str) and value else "*"
    rule = json.dumps({"tool": tool, "pattern": pattern, "action": "allow"}, ensure_ascii=False)
    setting = f'{{"permission": {{"rules": [{rule}]}}}}'
    how = f", or allow it with a permission rule in {rule_file(rt)}: {setting}"
    if found is not None and found.rule_match == "prefix" and pattern != "*":
        from zuno.policy.shell_analysis import analyse

        if not analyse(pattern).allowable:
            # An allow rule covers one plain command that runs nothing it is given.
            how = (
                " (no allow rule can cover this command: it is not one plain command "
                "known to run only what its words show)"
            )
    err.print(
        f"zuno: {tool} needed approval and there is no terminal to ask: add --yes to allow it{how}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


AllOpt = Annotated[bool, typer.Option("--all", help="Every workspace's sessions.")]


@app.command()
def sessions(
    json_: Json = False,
    db: Db = None,
    workspace: Workspace = Path("."),
    all_: AllOpt = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 1000,
) -> None:
    """List the sessions of the workspace (--all: of every one), newest first."""
    from zuno.cli.render import print_sessions, session_title

    where = None if all_ else str(workspace.resolve())
    with user_errors():
        store = open_store(db, migrate=False)  # reads: never changes the schema
    try:
        with user_errors():
            records = _sessions_in(store, where, limit)
            titles = {s.session_id: session_title(s, _first_prompt(store, s)) for s in records}
        if json_:
            _print_json([{**s.as_dict(), "title": titles[s.session_id]} for s in records])
        else:
            print_sessions(out, records, titles, where)
    finally:
        store.close()


def _sessions_in(store: Store, workspace: str | None, limit: int) -> list[SessionRecord]:
    """The newest sessions of ``workspace`` (None: of every workspace)."""
    if workspace is None:
        return store.list_sessions(limit)
    rows = store.query(
        "SELECT session_id FROM sessions WHERE workspace = ?"
        " ORDER BY created_at DESC, session_id DESC LIMIT ?",
        (workspace, limit),
    )
    return [s for (sid,) in rows if (s := store.get_session(str(sid))) is not None]


def _first_prompt(store: Store, session: SessionRecord) -> str | None:
    """The first user message of a session without a title (a title needs no look-up)."""
    if session.title:
        return None
    rows = store.query(
        "SELECT body FROM messages WHERE session_id = ? AND role = 'user' ORDER BY seq LIMIT 1",
        (session.session_id,),
    )
    if not rows:
        return None
    try:
        body: Any = json.loads(rows[0][0])
    except ValueError:
        return None
    return str(cast(dict[str, Any], body).get("text") or "") if isinstance(body, dict) else None


def find_session(store: Store, prefix: str) -> SessionRecord:
    """The session whose id is ``prefix`` or starts with it.

    Raises:
        UnknownSession: No session matches, or several do (they are named).
    """
    from zuno.session.runtime import UnknownSession

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


def _with_egress(
    call: dict[str, Any], ledgers: dict[tuple[str, int], list[dict[str, Any]]]
) -> dict[str, Any]:
    """A call's JSON with its egress ledger, when it ran in proxy network mode."""
    rows = ledgers.get((call["call_id"], call["attempt"]))
    return call if rows is None else {**call, "egress": rows}


@app.command()
def show(
    session: Annotated[str, typer.Argument(help="A session id (a unique prefix is enough).")],
    json_: Json = False,
    db: Db = None,
    workspace: Annotated[
        Path | None,
        typer.Option("--workspace", "-w", help="Ignored: a session keeps its own workspace."),
    ] = None,
) -> None:
    """The transcript of a session, from the store: prompts, steps, calls, notices, answer."""
    from zuno.cli.render import print_transcript
    from zuno.cli.transcript import build_transcript
    from zuno.durability.recovery import last_notice, pending_notice, settle_interrupted

    with user_errors():
        store = open_store(db, migrate=False)  # reads: never changes the schema
    try:
        with user_errors():
            record = find_session(store, session)
        # A store that needs an upgrade is read as it is, through a read-only
        # connection: nothing is settled or recorded.
        current = store.migration_needed is None
        if current:
            settle_interrupted(store, record.session_id)
        else:
            err.print(store.migration_needed, style="dim", markup=False, highlight=False)
        calls = store.calls(record.session_id)
        events = store.events(record.session_id)
        notice = pending_notice(store, record.session_id) if current else None
        transcript = build_transcript(store, record, calls=calls, events=events, pending=notice)
        if json_:
            conversation = [
                {"role": role, "text": body.get("text") or body.get("content") or ""}
                for role, body in store.messages(record.session_id)
            ]
            _print_json(
                {
                    **record.as_dict(),
                    "models": list(transcript.models),
                    "prompt": transcript.prompt,
                    "instructions": list(transcript.instructions),
                    "calls": [_with_egress(c.as_dict(), transcript.egress) for c in calls],
                    "not_run": [n.as_dict() for n in transcript.not_run],
                    "events": [e.as_dict() for e in events],
                    "children": [c.session_id for c in transcript.children],
                    "messages": conversation,
                    "entries": [e.as_dict() for e in transcript.entries],
                    "steps": [s.as_dict() for s in transcript.steps if s.number is not None],
                    "late_results": [late.as_dict() for late in transcript.late],
                    "usage": transcript.usage.as_dict(),
                    "children_usage": transcript.children_usage.as_dict(),
                    "final_answer": transcript.final_answer,
                    "ending": transcript.ending,
                    "recovery": notice.as_dict() if notice else None,
                    "recovery_notices": [n.as_dict() for n in transcript.given],
                    "last_recovery_notice": (
                        last_notice(store, record.session_id) if current else None
                    ),
                }
            )
        else:
            print_transcript(out, transcript)
    finally:
        store.close()


@app.command()
def doctor(workspace: Workspace = Path("."), db: Db = None, json_: Json = False) -> None:
    """Check what Zuno needs: rg, the store, the configuration files and folder trust, the
    language servers, each MCP server, the web_search backend and the sandbox."""
    from zuno.cli.doctor import diagnose, report_lines

    report = diagnose(workspace, db)
    if json_:
        _print_json(report)
        return
    for line in report_lines(report):
        out.print(line, markup=False, highlight=False)
    if not report.get("ok", False):
        raise typer.Exit(1)


@config_app.command("schema")
def config_schema_command() -> None:
    """Print the JSON Schema of zuno.json."""
    from zuno.config.loading import config_schema

    _print_json(config_schema())


@config_app.command("show")
def config_show(workspace: Workspace = Path(".")) -> None:
    """Print the effective configuration (user file, then workspace file)."""
    from zuno.config.loading import load_config

    with user_errors():
        config = load_config(workspace.resolve())
    warn_untrusted(config)
    _print_json({"sources": config.sources, "config": config.model_dump(mode="json")})


_built: dict[object, Any] = {}


def prebuild() -> None:
    """Build the click commands for plain and rich help once (for the command server).

    typer makes a pydantic adapter for every option each time the command tree is
    built: tens of milliseconds that a forked child need not pay again.
    """
    default_mode = app.rich_markup_mode
    for mode in (default_mode, None):
        app.rich_markup_mode = mode
        _built[mode] = typer.main.get_command(app)
    app.rich_markup_mode = default_mode


def only(typer_app: typer.Typer, first: Sequence[str]) -> typer.Typer:
    """``typer_app`` with only the command ``first`` names, when it names one of its own.

    typer builds every command's options before parsing (a tenth of a cold
    start): a command line that names a command needs only that one, and it
    is built, parsed and shown exactly as in the whole app. Anything else (an
    option, a group such as ``config``, a name that is no command) gets the
    whole app, for its help and its "no such command" suggestions.
    """
    if not first:
        return typer_app
    wanted = [
        info
        for info in typer_app.registered_commands
        if info.callback is not None
        and (info.name or typer.main.get_command_name(info.callback.__name__)) == first[0]
    ]
    if len(wanted) != 1:
        return typer_app
    narrowed = copy.copy(typer_app)
    narrowed.registered_commands = wanted
    narrowed.registered_groups = []
    return narrowed


def main() -> None:
    """Entry point of the console script."""
    # Undecodable bytes in arguments arrive as surrogates; echoing them back
    # must not end the command.
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")  # pyright: ignore[reportAttributeAccessIssue]
    # Help and usage errors for a program or a pipe are click's plain text: typer's
    # rich renderer imports rich's markdown and traceback machinery (~150 ms) to draw
    # panels nobody sees. A terminal keeps the rich help.
    from zuno.cli.plain import is_plain
    from zuno.durability.telemetry import export_from_environment

    if is_plain(sys.stdout):
        app.rich_markup_mode = None
    elif len(sys.argv) == 1 and sys.stdin.isatty():
        sys.argv.append("chat")  # `zuno` alone on a terminal: a conversation
    # Spans to a collector only when OTEL_EXPORTER_OTLP_ENDPOINT asks (docs/headless.md).
    stop_exporting = export_from_environment()
    try:
        command = _built.get(app.rich_markup_mode)
        if command is None:
            only(app, sys.argv[1:2])()
        else:
            command()  # built by the command server before it forked (prebuild)
    finally:
        if stop_exporting is not None:
            stop_exporting()  # sends what is still queued
