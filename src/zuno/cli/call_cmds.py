"""``zuno tools``, ``zuno call`` and ``zuno batch``: the tool surface, and calls made by hand.

A direct call goes through the whole pipeline, as a model's would: it is
validated, classified, put to the approver and recorded. Its result is printed
as the tool wrote it (or as JSON), and when a call is refused because no one
could be asked, one line on stderr says how to allow it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from zuno.cli.app import app
from zuno.cli.command_runtime import Where, dispatch_now, exit_for, runtime
from zuno.cli.console import err, out, print_json
from zuno.cli.errors import fail
from zuno.cli.options import (
    AgentOpt,
    Db,
    Json,
    NewSession,
    SessionOpt,
    StreamOpt,
    WaitOpt,
    Workspace,
    Yes,
    check_mode_name,
)
from zuno.cli.signals import run_until_stopped

# The runtime and the dispatcher are imported by the commands that use them.
if TYPE_CHECKING:
    from collections.abc import Callable

    from zuno.dispatch.dispatcher import CallRequest, CallResult
    from zuno.integrations.mcp.errors import McpServerError
    from zuno.session.runtime import Runtime

__all__ = ["batch", "call", "rule_file", "tools"]


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
            print_json(surface_json(surface, agent, failures))
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
    where = Where(session, new_session, agent, wait, mode)
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
    where = Where(session, new_session, agent, wait, mode)
    _step(workspace, db, yes, where, json_, requests, one=False, stream=stream)


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
    where: Where,
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
            results = dispatch_now(rt, state, requests)
        finally:
            following()
        if json_:
            print_json(results[0].as_dict() if one else [r.as_dict() for r in results])
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
        exit_for(results)


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
        from zuno.policy.shell_rules import analyse

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
