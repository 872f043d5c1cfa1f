"""``zuno mcp serve``: a real ``python -m zuno`` process, real MCP clients over stdio and HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

from zuno.config.trust import trust
from zuno.core.declarations import Effect
from zuno.serve.mcp_server import annotations_for
from zuno.session.builtin_tools import builtin_tools

pytestmark = pytest.mark.anyio


def zuno_env(db: Path) -> dict[str, str]:
    return {"ZUNO_CONFIG_HOME": os.environ["ZUNO_CONFIG_HOME"], "ZUNO_DB": str(db)}


def serve_params(workspace: Path, db: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "zuno", "mcp", "serve", "-w", str(workspace), *extra],
        env=zuno_env(db),
    )


def zuno_json(workspace: Path, db: Path, *args: str) -> Any:
    proc = subprocess.run(
        [sys.executable, "-m", "zuno", *args, "--json"],
        cwd=workspace,
        env={**os.environ, **zuno_env(db)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


@pytest.fixture
def project(workspace: Path, tmp_path: Path) -> tuple[Path, Path]:
    (workspace / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    return workspace, tmp_path / "serve.db"


async def test_stdio_lists_the_surface_with_schemas_and_annotations(
    project: tuple[Path, Path],
) -> None:
    workspace, db = project
    async with Client(serve_params(workspace, db)) as client:
        listing = {t.name: t for t in (await client.list_tools()).tools}
    assert {"read", "glob", "grep", "write", "apply_patch", "shell"} <= set(listing)
    read, write = listing["read"], listing["write"]
    assert "path" in read.input_schema["properties"]
    assert "path" in read.input_schema["required"]
    assert read.description
    assert read.annotations is not None and write.annotations is not None
    assert read.annotations.read_only_hint is True and read.annotations.idempotent_hint is True
    assert read.annotations.destructive_hint is False
    assert write.annotations.read_only_hint is False and write.annotations.destructive_hint is True
    assert write.annotations.idempotent_hint is False


async def test_stdio_calls_go_through_the_dispatcher_and_are_recorded(
    project: tuple[Path, Path],
) -> None:
    workspace, db = project
    async with Client(serve_params(workspace, db)) as client:
        read = await client.call_tool("read", {"path": "notes.txt"})
        grep = await client.call_tool("grep", {"pattern": "beta"})
        write = await client.call_tool("write", {"path": "new.txt", "content": "hi\n"})
        invalid = await client.call_tool("read", {"colour": "red"})
    assert not read.is_error and "beta" in text_of(read)
    assert not grep.is_error and "notes.txt" in text_of(grep)
    # Strict mode asks for a write; nobody can be asked over stdio.
    assert write.is_error
    assert "Outcome: blocked (denied)" in text_of(write)
    assert "Approvals cannot be asked over MCP" in text_of(write) and "--yes" in text_of(write)
    assert not (workspace / "new.txt").exists()
    assert invalid.is_error and "blocked (invalid_arguments)" in text_of(invalid)
    assert "`colour`" in text_of(invalid)
    assert read.meta is not None and write.meta is not None
    assert read.meta["zuno/call"]["outcome"] == "ok"
    assert write.meta["zuno/call"]["block_kind"] == "denied"
    session = read.meta["zuno/call"]["session_id"]
    assert write.meta["zuno/call"]["session_id"] == session  # one session per connection

    shown = zuno_json(workspace, db, "show", session)
    calls = [(c["tool"], c["outcome"], c["block_kind"]) for c in shown["calls"]]
    assert calls == [
        ("read", "ok", None),
        ("grep", "ok", None),
        ("write", "blocked", "denied"),
        ("read", "blocked", "invalid_arguments"),
    ]


async def test_yes_approves_what_strict_mode_would_ask(project: tuple[Path, Path]) -> None:
    workspace, db = project
    async with Client(serve_params(workspace, db, "--yes")) as client:
        write = await client.call_tool("write", {"path": "new.txt", "content": "hi\n"})
    assert not write.is_error, text_of(write)
    assert (workspace / "new.txt").read_text() == "hi\n"


async def test_permission_rules_allow_without_yes(project: tuple[Path, Path]) -> None:
    workspace, db = project
    rules = [{"tool": "write", "pattern": "allowed/**", "action": "allow"}]
    (workspace / "zuno.json").write_text(json.dumps({"permission": {"rules": rules}}))
    trust(workspace)  # allow rules count from a trusted folder only
    async with Client(serve_params(workspace, db)) as client:
        allowed = await client.call_tool("write", {"path": "allowed/a.txt", "content": "a"})
        other = await client.call_tool("write", {"path": "b.txt", "content": "b"})
    assert not allowed.is_error and (workspace / "allowed" / "a.txt").exists()
    assert other.is_error and not (workspace / "b.txt").exists()


async def test_an_agents_allowlist_is_the_served_surface(project: tuple[Path, Path]) -> None:
    workspace, db = project
    async with Client(serve_params(workspace, db, "--agent", "explore")) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        write = await client.call_tool("write", {"path": "x.txt", "content": "x"})
    assert "read" in names and "write" not in names
    assert write.is_error and "blocked (unavailable)" in text_of(write)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(project: tuple[Path, Path]) -> Iterator[str]:
    workspace, db = project
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "zuno", "mcp", "serve", "--port", str(port), "-w", str(workspace)],
        env={**os.environ, **zuno_env(db)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(300):
            if proc.poll() is not None:
                assert proc.stderr is not None
                raise AssertionError(f"zuno mcp serve exited: {proc.stderr.read().decode()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def test_streamable_http_serves_the_same_door(
    project: tuple[Path, Path], http_server: str
) -> None:
    workspace, db = project
    async with Client(http_server) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        read = await client.call_tool("read", {"path": "notes.txt"})
        write = await client.call_tool("write", {"path": "web.txt", "content": "w"})
    assert {"read", "write"} <= names
    assert not read.is_error and "gamma" in text_of(read)
    assert write.is_error and "blocked (denied)" in text_of(write)
    assert not (workspace / "web.txt").exists()
    assert read.meta is not None
    shown = zuno_json(workspace, db, "show", read.meta["zuno/call"]["session_id"])
    assert [(c["tool"], c["outcome"]) for c in shown["calls"]] == [
        ("read", "ok"),
        ("write", "blocked"),
    ]


def test_annotations_follow_declarations() -> None:
    for tool in builtin_tools():
        hints = annotations_for(tool)
        read_only = tool.declaration.effect is Effect.READ_ONLY and not tool.mixed
        assert hints.read_only_hint is read_only, tool.name
        if tool.declaration.effect is Effect.SIDE_EFFECTING:
            assert hints.destructive_hint is True, tool.name


def test_serve_refuses_a_port_with_stdio(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "zuno", "mcp", "serve", "--transport", "stdio", "--port", "9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--port serves streamable HTTP" in proc.stderr


async def test_results_hold_the_output_in_structured_content_and_the_record_in_meta(
    project: tuple[Path, Path],
) -> None:
    workspace, db = project
    rules = [{"tool": "shell", "pattern": "*", "action": "allow"}]
    (workspace / "zuno.json").write_text(json.dumps({"permission": {"rules": rules}}))
    trust(workspace)
    async with Client(serve_params(workspace, db)) as client:
        listing = (await client.list_tools()).tools
        read = await client.call_tool("read", {"path": "notes.txt"})
        shell = await client.call_tool("shell", {"command": "echo from-the-shell"})
        write = await client.call_tool("write", {"path": "new.txt", "content": "hi\n"})
    # Every served tool declares its structured output: the text, then its own fields.
    for tool in listing:
        assert tool.output_schema is not None, tool.name
        assert tool.output_schema["required"] == ["output"], tool.name
    for result in (read, shell, write):
        assert result.structured_content is not None
        # The text block is the plain output; the structured content says it too.
        assert result.structured_content["output"] == text_of(result)
        assert "call_id" not in result.structured_content  # the record is in _meta
        assert result.meta is not None
    assert "beta" in read.structured_content["output"]
    assert read.structured_content["total_lines"] == 3
    assert "from-the-shell" in shell.structured_content["output"]
    assert shell.structured_content["exit_status"] == 0
    # A denial keeps its reason in both.
    assert "Approvals cannot be asked over MCP" in write.structured_content["output"]
    assert write.is_error
    assert write.meta is not None and read.meta is not None
    record: dict[str, Any] = write.meta["zuno/call"]
    assert (record["outcome"], record["block_kind"]) == ("blocked", "denied")
    assert record["effect"] == "side_effecting" and record["call_id"].startswith("call_")
    assert read.meta["zuno/call"]["session_id"] == record["session_id"]


async def test_server_info_names_zunos_version(project: tuple[Path, Path]) -> None:
    from zuno.core.installed import installed_version

    workspace, db = project
    async with Client(serve_params(workspace, db)) as client:
        info = client.server_info
    assert info is not None
    assert info.name == "zuno"
    assert info.version == installed_version() != ""


def test_the_stdio_banner_is_one_line_on_a_narrow_terminal(project: tuple[Path, Path]) -> None:
    workspace, db = project
    proc = subprocess.run(
        [sys.executable, "-m", "zuno", "mcp", "serve", "-w", str(workspace)],
        env={**os.environ, **zuno_env(db), "COLUMNS": "40"},
        stdin=subprocess.DEVNULL,  # the client hangs up at once
        capture_output=True,
        text=True,
        timeout=120,
    )
    banner = [line for line in proc.stderr.splitlines() if "serving the 'build' agent" in line]
    assert len(banner) == 1, proc.stderr
    assert "over MCP on stdio (session ses_" in banner[0] and banner[0].endswith(")")


def serve_http(workspace: Path, db: Path) -> tuple[subprocess.Popen[str], int]:
    """``zuno mcp serve --port`` started, once its banner says it serves."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "zuno", "mcp", "serve", "--port", str(port), "-w", str(workspace)],
        env={**os.environ, **zuno_env(db)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    banner = proc.stderr.readline()  # printed once serving (the port is bound earlier)
    assert "serving the 'build' agent over MCP at http://127.0.0.1" in banner
    return proc, port


def exit_status_within(proc: subprocess.Popen[str], seconds: float) -> int | None:
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


@pytest.mark.parametrize("client", [False, True], ids=["idle", "client-connected"])
async def test_sigterm_stops_the_http_server_cleanly(
    project: tuple[Path, Path], client: bool
) -> None:
    workspace, db = project
    proc, port = await anyio.to_thread.run_sync(serve_http, workspace, db)
    said: list[str] = []
    status: list[int | None] = []
    try:
        if client:
            # A client with a live session (its event stream open) when the signal comes.
            with contextlib.suppress(Exception):  # the client's own ending, the server gone
                async with Client(f"http://127.0.0.1:{port}/mcp") as connected:
                    said.append(text_of(await connected.call_tool("read", {"path": "notes.txt"})))
                    proc.terminate()
                    status.append(await anyio.to_thread.run_sync(exit_status_within, proc, 30))
            assert said and "gamma" in said[0]
        else:
            proc.terminate()
        _, stderr = await anyio.to_thread.run_sync(proc.communicate, None, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if client:
        assert status == [0], f"still running 30 s after SIGTERM: {stderr}"
    assert "Traceback" not in stderr, stderr
    assert "CancelledError" not in stderr, stderr
    assert proc.returncode == 0, stderr  # a requested stop is a clean exit


def test_sigterm_stops_the_stdio_server_while_its_client_keeps_stdin_open(
    project: tuple[Path, Path],
) -> None:
    workspace, db = project
    proc = subprocess.Popen(
        [sys.executable, "-m", "zuno", "mcp", "serve", "-w", str(workspace)],
        env={**os.environ, **zuno_env(db)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        }
        proc.stdin.write(json.dumps(hello) + "\n")
        proc.stdin.flush()
        answer = json.loads(proc.stdout.readline())  # serving: the stop signals are handled
        assert answer["result"]["serverInfo"]["name"] == "zuno"
        proc.terminate()  # stdin stays open, as a client that is stuck would leave it
        status = exit_status_within(proc, 30)
        stderr = proc.stderr.read() if status is not None and proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert status == 0, "still running 30 s after SIGTERM"
    assert "Traceback" not in stderr, stderr
