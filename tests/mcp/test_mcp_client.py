"""MCP servers' tools in the registry: real servers (stdio, HTTP), calls through the runtime."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncGenerator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from zuno.config.loading import Config
from zuno.config.mcp import McpServerSettings
from zuno.core.declarations import BlockKind, Concurrency, Declaration, Effect, Outcome, Replay
from zuno.dispatch.dispatcher import CallRequest
from zuno.integrations.mcp.client import McpServerError, McpServers, connect_mcp_servers
from zuno.integrations.mcp.remote import choose_declaration, describe_content, tool_name
from zuno.policy.approvals import ApprovalDecision, ApprovalRequest, ApproveAll, CallbackApprover
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

DEMO = Path(__file__).with_name("mcp_demo_server.py")


def demo_config(marks: Path, *, trusted: bool = False, **server: Any) -> Config:
    settings = {
        "command": sys.executable,
        "args": [str(DEMO)],
        "env": {"DEMO_MARKS": str(marks)},
        "trusted": trusted,
        "sandbox": False,  # it leaves marks outside the workspace
        **server,
    }
    return Config.model_validate({"mcp": {"servers": {"demo": settings}}})


@asynccontextmanager
async def demo_runtime(
    workspace: Path, tmp_path: Path, config: Config, approver: Any = None
) -> AsyncGenerator[tuple[Runtime, McpServers]]:
    async with connect_mcp_servers(config, workspace) as servers:
        rt = Runtime(
            workspace,
            config=config,
            db_path=tmp_path / "zuno.db",
            approver=approver or ApproveAll(),
            tools=servers.tools(),
        )
        try:
            async with rt:
                yield rt, servers
        finally:
            rt.close()


def exploded(marks: Path) -> list[str]:
    """The targets the demo server's explode ran for."""
    return sorted(p.name.removeprefix("exploded-") for p in marks.glob("exploded-*"))


class Asked:
    """An approver that approves and remembers which tools it was asked about."""

    def __init__(self) -> None:
        self.tools: list[str] = []

    def __call__(self, request: ApprovalRequest) -> ApprovalDecision:
        self.tools.append(request.tool)
        return ApprovalDecision.APPROVE_ONCE


STRICT = Declaration()
READ_ONLY = Declaration(Effect.READ_ONLY, Replay.SAFE, Concurrency.PARALLEL_SAFE)


async def test_untrusted_server_tools_fail_closed_and_strict_mode_asks_for_both(
    workspace: Path, tmp_path: Path
) -> None:
    asked = Asked()
    config = demo_config(tmp_path)
    async with demo_runtime(workspace, tmp_path, config, CallbackApprover(asked)) as (rt, _):
        surface = rt.surface()
        lookup = surface.get("mcp__demo__lookup")
        explode = surface.get("mcp__demo__explode")
        assert lookup is not None and explode is not None
        # The read_only_hint of an untrusted server is not believed.
        assert lookup.declaration == STRICT and explode.declaration == STRICT
        assert lookup.schema()["properties"]["key"]["type"] == "string"
        session = rt.open_session()
        found = await rt.call(session, "mcp__demo__lookup", {"key": "k", "count": 2})
        boom = await rt.call(session, "mcp__demo__explode", {"target": "door"})
    assert (found.outcome, found.output) == (Outcome.OK, "value of k x2")
    assert (boom.outcome, boom.output) == (Outcome.OK, "exploded door")
    assert asked.tools == ["mcp__demo__lookup", "mcp__demo__explode"]
    assert (tmp_path / "exploded-door").exists()


async def test_trusted_read_only_tool_is_an_inspection_and_is_not_prompted(
    workspace: Path, tmp_path: Path
) -> None:
    asked = Asked()
    config = demo_config(tmp_path, trusted=True)
    async with demo_runtime(workspace, tmp_path, config, CallbackApprover(asked)) as (rt, _):
        surface = rt.surface()
        lookup = surface.get("mcp__demo__lookup")
        explode = surface.get("mcp__demo__explode")
        assert lookup is not None and explode is not None
        assert lookup.declaration == READ_ONLY
        # Trust believes read-only hints only: destructive stays strict.
        assert explode.declaration == STRICT
        session = rt.open_session()
        results = await rt.dispatch(
            session, [CallRequest("mcp__demo__lookup", {"key": k}) for k in "abc"]
        )
        boom = await rt.call(session, "mcp__demo__explode", {"target": "wall"})
    assert [r.output for r in results] == ["value of a x1", "value of b x1", "value of c x1"]
    assert boom.outcome is Outcome.OK
    assert asked.tools == ["mcp__demo__explode"]


async def test_a_configured_declaration_wins_over_the_strict_default(
    workspace: Path, tmp_path: Path
) -> None:
    config = demo_config(tmp_path, tools={"lookup": {"effect": "read_only", "replay": "safe"}})
    async with demo_runtime(workspace, tmp_path, config) as (rt, _):
        lookup = rt.surface().get("mcp__demo__lookup")
        assert lookup is not None
        # Fields left out keep the strict default (Exclusive).
        assert lookup.declaration == Declaration(
            Effect.READ_ONLY, Replay.SAFE, Concurrency.EXCLUSIVE
        )


async def test_invalid_arguments_are_blocked_naming_the_field_and_never_sent(
    workspace: Path, tmp_path: Path
) -> None:
    async with demo_runtime(workspace, tmp_path, demo_config(tmp_path)) as (rt, _):
        session = rt.open_session()
        wrong_type = await rt.call(session, "mcp__demo__explode", {"target": 5})
        missing = await rt.call(session, "mcp__demo__explode", {})
        nested = await rt.call(session, "mcp__demo__lookup", {"key": "k", "count": "many"})
        rows = {r.call_id: r for r in rt.store.calls(session.session_id)}
    for result in (wrong_type, missing, nested):
        assert result.outcome is Outcome.BLOCKED
        assert result.block_kind is BlockKind.INVALID_ARGUMENTS
        assert rows[result.call_id].block_kind == "invalid_arguments"
    assert "`target`" in wrong_type.output and "string" in wrong_type.output
    assert "`target` is required" in missing.output
    assert "`count`" in nested.output and "integer" in nested.output
    assert exploded(tmp_path) == []  # nothing reached the server


async def test_a_server_that_dies_mid_call_leaves_an_uncertain_outcome(
    workspace: Path, tmp_path: Path
) -> None:
    async with demo_runtime(workspace, tmp_path, demo_config(tmp_path)) as (rt, _):
        session = rt.open_session()
        died = await rt.call(session, "mcp__demo__explode", {"target": "die"})
        # A read-only call is still admitted (it is the inspection the rule asks
        # for), and the dead server makes it an error before anything is sent.
        look = await rt.call(session, "mcp__demo__read_resource", {"uri": "memo://notes"})
        rows = {r.call_id: r for r in rt.store.calls(session.session_id)}
    assert died.outcome is Outcome.UNCERTAIN
    assert "may or may not" in died.output
    assert rows[died.call_id].outcome == "uncertain"
    assert (tmp_path / "exploded-die").exists()  # it was sent and did run
    assert (look.outcome, look.block_kind) == (Outcome.BLOCKED, BlockKind.UNAVAILABLE)
    assert "was not sent" in look.output and "'demo'" in look.output


async def test_after_the_server_died_a_new_call_is_blocked_unavailable_not_sent(
    workspace: Path, tmp_path: Path
) -> None:
    config = demo_config(tmp_path)
    config.replay.require_inspection = False  # look past the inspection rule
    async with demo_runtime(workspace, tmp_path, config) as (rt, _):
        session = rt.open_session()
        died = await rt.call(session, "mcp__demo__explode", {"target": "die"})
        after = await rt.call(session, "mcp__demo__explode", {"target": "later"})
    assert died.outcome is Outcome.UNCERTAIN
    assert (after.outcome, after.block_kind) == (Outcome.BLOCKED, BlockKind.UNAVAILABLE)
    assert "was not sent" in after.output
    assert not (tmp_path / "exploded-later").exists()


async def test_is_error_results_are_error_outcomes_with_the_servers_text(
    workspace: Path, tmp_path: Path
) -> None:
    async with demo_runtime(workspace, tmp_path, demo_config(tmp_path)) as (rt, _):
        session = rt.open_session()
        result = await rt.call(session, "mcp__demo__explode", {"target": "fail"})
    assert result.outcome is Outcome.ERROR and result.is_error
    assert "fireproof" in result.output and "'demo'" in result.output


async def test_resources_are_read_through_a_read_only_tool(workspace: Path, tmp_path: Path) -> None:
    async with demo_runtime(workspace, tmp_path, demo_config(tmp_path)) as (rt, _):
        tool = rt.surface().get("mcp__demo__read_resource")
        assert tool is not None and tool.declaration == READ_ONLY
        assert "memo://notes" in tool.description
        session = rt.open_session()
        result = await rt.call(session, "mcp__demo__read_resource", {"uri": "memo://notes"})
    assert result.outcome is Outcome.OK
    assert "first note\nsecond note" in result.output


async def test_large_results_are_bounded_by_the_output_limits(
    workspace: Path, tmp_path: Path
) -> None:
    config = demo_config(tmp_path)
    config.tool_output.max_lines = 10
    async with demo_runtime(workspace, tmp_path, config) as (rt, _):
        session = rt.open_session()
        result = await rt.call(session, "mcp__demo__spam", {"lines": 500})
    assert result.outcome is Outcome.OK
    assert result.output.count("\n") < 20 and "line 0" in result.output
    assert result.artifact is not None
    assert "line 499" in await anyio.Path(result.artifact).read_text()


async def test_requests_in_flight_share_one_bound(workspace: Path, tmp_path: Path) -> None:
    config = demo_config(tmp_path)
    config.concurrency.mcp_connections = 3
    async with connect_mcp_servers(config, workspace) as servers:
        assert servers.limiter.total_tokens == 3
        assert [c.name for c in servers.connections] == ["demo"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_demo(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(DEMO), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"DEMO_MARKS": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(300):
        assert proc.poll() is None, "the HTTP server exited before listening"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            import time

            time.sleep(0.1)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


async def test_a_server_over_streamable_http(
    workspace: Path, tmp_path: Path, http_demo: str
) -> None:
    config = Config.model_validate(
        {"mcp": {"servers": {"web": {"url": http_demo, "trusted": True}}}}
    )
    async with demo_runtime(workspace, tmp_path, config) as (rt, _):
        lookup = rt.surface().get("mcp__web__lookup")
        assert lookup is not None and lookup.declaration == READ_ONLY
        session = rt.open_session()
        found = await rt.call(session, "mcp__web__lookup", {"key": "h"})
        boom = await rt.call(session, "mcp__web__explode", {"target": "http"})
    assert found.outcome is Outcome.OK and found.output == "value of h x1"
    assert boom.outcome is Outcome.OK and (tmp_path / "exploded-http").exists()


async def test_a_server_that_fails_to_start_names_itself_and_its_command(
    workspace: Path,
) -> None:
    script = "import sys; print('missing API token', file=sys.stderr); sys.exit(2)"
    config = Config.model_validate(
        {"mcp": {"servers": {"broken": {"command": sys.executable, "args": ["-c", script]}}}}
    )
    with pytest.raises(McpServerError) as caught:
        async with connect_mcp_servers(config, workspace):
            pass
    message = str(caught.value)
    assert "'broken'" in message and sys.executable in message
    assert "missing API token" in message  # its stderr explains why
    assert '"enabled" to false' in message


async def test_a_missing_command_is_a_startup_error(workspace: Path) -> None:
    config = Config.model_validate(
        {"mcp": {"servers": {"ghost": {"command": "no-such-mcp-server-here"}}}}
    )
    with pytest.raises(McpServerError, match="'no-such-mcp-server-here' was not found"):
        async with connect_mcp_servers(config, workspace):
            pass


async def test_disabled_servers_are_not_started(workspace: Path) -> None:
    config = Config.model_validate(
        {"mcp": {"servers": {"off": {"command": "no-such-command", "enabled": False}}}}
    )
    async with connect_mcp_servers(config, workspace) as servers:
        assert servers.connections == [] and servers.tools() == []


# Declarations, names and results, without a server ------------------------------


def remote(name: str, **hints: bool) -> types.Tool:
    return types.Tool(
        name=name,
        input_schema={"type": "object"},
        annotations=types.ToolAnnotations.model_validate(hints) if hints else None,
    )


@pytest.mark.parametrize(
    ("trusted", "hints", "expected"),
    [
        (False, {"read_only_hint": True}, STRICT),
        (False, {"idempotent_hint": True}, STRICT),
        (False, {"destructive_hint": False}, STRICT),
        (True, {"read_only_hint": True}, READ_ONLY),
        (True, {"idempotent_hint": True}, STRICT),
        (True, {"destructive_hint": False}, STRICT),
        (True, {}, STRICT),
    ],
)
def test_declarations_fail_closed(
    trusted: bool, hints: dict[str, bool], expected: Declaration
) -> None:
    settings = McpServerSettings(command="x", trusted=trusted)
    assert choose_declaration(remote("t", **hints), settings).declaration == expected


def test_untrusted_hints_are_reported_as_ignored() -> None:
    choice = choose_declaration(remote("t", read_only_hint=True), McpServerSettings(command="x"))
    assert choice.source == "strict default"
    assert choice.notes == ("read_only_hint ignored (server not trusted)",)


def test_tool_names_are_model_safe_and_bounded() -> None:
    assert tool_name("gh", "create issue.v2") == "mcp__gh__create_issue_v2"
    long = tool_name("server", "x" * 100)
    assert len(long) == 64 and long.startswith("mcp__server__x")
    assert long != tool_name("server", "x" * 99)


def test_content_other_than_text_is_described() -> None:
    text = describe_content(
        [
            types.TextContent(type="text", text="hello"),
            types.ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"),
            types.ResourceLink(type="resource_link", name="spec", uri="file:///spec.md"),
        ]
    )
    assert text.splitlines() == [
        "hello",
        "[image: image/png, 5 B]",
        "[resource link: spec <file:///spec.md>]",
    ]


def test_a_schema_that_forbids_extra_properties_names_them() -> None:
    from pydantic import ValidationError

    from zuno.integrations.mcp.remote import McpArguments

    class Strict(McpArguments):
        json_schema = {
            "type": "object",
            "properties": {"key": {"type": "string"}},
            "additionalProperties": False,
        }

    with pytest.raises(ValidationError) as caught:
        Strict.model_validate({"key": "k", "colour": "red"})
    assert [(e["type"], e["loc"]) for e in caught.value.errors()] == [
        ("extra_forbidden", ("colour",))
    ]
    assert Strict.model_validate({"key": "k"}).payload() == {"key": "k"}


def test_a_server_needs_exactly_one_transport() -> None:
    with pytest.raises(ValueError, match='exactly one of "command"'):
        McpServerSettings.model_validate({"command": "x", "url": "http://127.0.0.1/mcp"})
    with pytest.raises(ValueError, match="must be 1-40 letters"):
        Config.model_validate({"mcp": {"servers": {"a b": {"command": "x"}}}})


async def test_a_server_that_died_between_calls_is_unavailable_nothing_sent(
    workspace: Path, tmp_path: Path
) -> None:
    config = demo_config(tmp_path, trusted=True)
    async with demo_runtime(workspace, tmp_path, config) as (rt, servers):
        session = rt.open_session()
        pid = await rt.call(session, "mcp__demo__pid", {})
        assert pid.outcome is Outcome.OK
        connection = servers.get("demo")
        assert connection is not None and connection.connected
        os.kill(int(pid.output), signal.SIGKILL)
        with anyio.fail_after(60):  # a bound on the wait, not a timing assertion
            while connection.connected:  # noqa: ASYNC110 - the SDK signals no event
                await anyio.sleep(0.02)
        after = await rt.call(session, "mcp__demo__explode", {"target": "after-death"})
    assert (after.outcome, after.block_kind) == (Outcome.BLOCKED, BlockKind.UNAVAILABLE)
    assert "was not sent" in after.output
    assert exploded(tmp_path) == []


async def test_no_answer_within_the_call_timeout_is_uncertain(
    workspace: Path, tmp_path: Path
) -> None:
    config = demo_config(tmp_path, call_timeout=0.5)
    async with demo_runtime(workspace, tmp_path, config) as (rt, servers):
        session = rt.open_session()
        stalled = await rt.call(session, "mcp__demo__stall", {"seconds": 60})
        connection = servers.get("demo")
        assert connection is not None
        still_connected = connection.connected
    assert stalled.outcome is Outcome.UNCERTAIN
    assert "no answer within 0.5s" in stalled.output
    assert still_connected  # a slow server is not a dead one
