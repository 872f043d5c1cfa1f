"""MCP servers under faults: hints never make a side effect retryable, dead and
unreachable servers never take the runtime down, and results keep what the server sent.

Real servers only: ``mcp_fault_server.py`` over stdio and over streamable HTTP on
127.0.0.1, each recording every invocation it receives in a file.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from zuno.config.loading import Config
from zuno.config.mcp import McpServerSettings
from zuno.core.declarations import BlockKind, Concurrency, Declaration, Effect, Outcome, Replay
from zuno.dispatch.dispatcher import CallRequest
from zuno.integrations.mcp.remote import choose_declaration
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

FAULT = Path(__file__).with_name("mcp_fault_server.py")


def stdio_server(marks: Path, **extra: Any) -> dict[str, Any]:
    marks.mkdir(parents=True, exist_ok=True)
    return {
        "command": sys.executable,
        "args": [str(FAULT)],
        "env": {"FAULT_MARKS": str(marks)},
        "sandbox": False,  # it leaves marks outside the workspace
        **extra,
    }


def invocations(marks: Path) -> list[str]:
    """What the server recorded receiving, one ``<tool> <tag>`` per call."""
    log = marks / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """A fault server process serving streamable HTTP on 127.0.0.1."""

    def __init__(self, marks: Path) -> None:
        marks.mkdir(parents=True, exist_ok=True)
        self.marks = marks
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen(
            [sys.executable, str(FAULT), "http", str(self.port)],
            env={**os.environ, "FAULT_MARKS": str(marks)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(600):
            assert self.proc.poll() is None, "the fault server exited before listening"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"nothing listens on 127.0.0.1:{self.port}")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=60)

    def listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False


@pytest.fixture
def http_servers(tmp_path: Path) -> Iterator[list[HttpServer]]:
    started: list[HttpServer] = []
    yield started
    for server in started:
        if server.proc.poll() is None:
            server.kill()


@asynccontextmanager
async def runtime(workspace: Path, tmp_path: Path, config: Config) -> AsyncGenerator[Runtime]:
    """A runtime that connects the configured servers itself, as the CLI's does."""
    rt = Runtime(workspace, config=config, db_path=tmp_path / "zuno.db", approver=ApproveAll())
    try:
        async with rt:
            yield rt
    finally:
        rt.close()


# 1. Hints never make a side effect retryable ----------------------------------------


def remote(name: str, **hints: bool) -> types.Tool:
    return types.Tool(
        name=name,
        input_schema={"type": "object"},
        annotations=types.ToolAnnotations.model_validate(hints),
    )


@pytest.mark.parametrize(
    "hints",
    [
        {"idempotent_hint": True},
        {"idempotent_hint": True, "destructive_hint": False},
        {"idempotent_hint": True, "open_world_hint": False},
    ],
)
def test_a_trusted_servers_idempotent_hint_leaves_a_side_effect_never(
    hints: dict[str, bool],
) -> None:
    settings = McpServerSettings(command="x", trusted=True)
    assert choose_declaration(remote("git_add", **hints), settings).declaration == Declaration()


def test_a_configured_side_effect_keeps_never_whatever_the_trusted_hints() -> None:
    settings = McpServerSettings.model_validate(
        {"command": "x", "trusted": True, "tools": {"sync": {"effect": "side_effecting"}}}
    )
    hinted = remote("sync", read_only_hint=True, idempotent_hint=True)
    declaration = choose_declaration(hinted, settings).declaration
    assert declaration == Declaration(Effect.SIDE_EFFECTING, Replay.NEVER, Concurrency.EXCLUSIVE)


def test_only_the_configuration_declares_a_side_effect_safe() -> None:
    settings = McpServerSettings.model_validate(
        {"command": "x", "tools": {"git_add": {"replay": "safe"}}}
    )
    declaration = choose_declaration(remote("git_add"), settings).declaration
    assert declaration == Declaration(replay=Replay.SAFE)


async def test_a_timed_out_idempotent_hinted_tool_of_a_trusted_server_runs_once(
    workspace: Path, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    server = stdio_server(marks, trusted=True, call_timeout=1.0)
    config = Config.model_validate({"mcp": {"servers": {"git": server}}})
    async with runtime(workspace, tmp_path, config) as rt:
        session = rt.open_session()
        result = await rt.call(session, "mcp__git__git_add", {"tag": "src/a.py"})
        row = {r.call_id: r for r in rt.store.calls(session.session_id)}[result.call_id]
        # A later answer from the same server proves every earlier request was read.
        later = await rt.call(session, "mcp__git__pid", {})
    assert later.outcome is Outcome.OK
    assert invocations(marks) == ["git_add src/a.py"]
    assert result.outcome is Outcome.UNCERTAIN and row.outcome == "uncertain"
    assert row.attempt == 1 and row.replay == "never"


# 2. A dead or unreachable HTTP server fails its own calls, nothing else -------------


async def test_http_servers_dying_mid_call_and_down_fail_only_their_own_calls(
    workspace: Path, tmp_path: Path, http_servers: list[HttpServer]
) -> None:
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    dies, down = HttpServer(tmp_path / "dies"), HttpServer(tmp_path / "down")
    http_servers += [dies, down]
    local = tmp_path / "local"
    config = Config.model_validate(
        {
            "mcp": {
                "servers": {
                    "dies": {"url": dies.url},
                    "down": {"url": down.url},
                    "local": stdio_server(local),
                }
            }
        }
    )
    async with runtime(workspace, tmp_path, config) as rt:
        session = rt.open_session()
        down.kill()  # connected at startup, nothing listens by the time of the batch
        assert not down.listening()
        results = await rt.dispatch(
            session,
            [
                CallRequest("read", {"path": "notes.txt"}),
                CallRequest("mcp__local__touch", {"tag": "before"}),
                CallRequest("mcp__down__touch", {"tag": "refused"}),
                CallRequest("mcp__dies__die", {"tag": "mid-call"}),
                CallRequest("grep", {"pattern": "beta"}),
                CallRequest("read", {"path": "notes.txt"}),
            ],
        )
        # The next step goes on with the other servers (a read above inspected).
        after = await rt.dispatch(
            session,
            [
                CallRequest("mcp__local__touch", {"tag": "after"}),
                CallRequest("mcp__down__touch", {"tag": "still-refused"}),
            ],
        )
        rows = {r.call_id: r for r in rt.store.calls(session.session_id)}
    got = [(r.tool, r.outcome, r.block_kind) for r in [*results, *after]]
    assert got == [
        ("read", Outcome.OK, None),
        ("mcp__local__touch", Outcome.OK, None),
        ("mcp__down__touch", Outcome.BLOCKED, BlockKind.UNAVAILABLE),
        ("mcp__dies__die", Outcome.UNCERTAIN, None),
        ("grep", Outcome.OK, None),
        ("read", Outcome.OK, None),
        ("mcp__local__touch", Outcome.OK, None),
        ("mcp__down__touch", Outcome.BLOCKED, BlockKind.UNAVAILABLE),
    ]
    for result in [*results, *after]:
        row = rows[result.call_id]
        assert row.outcome == result.outcome.value
        assert row.block_kind == (result.block_kind.value if result.block_kind else None)
    assert "'down'" in results[2].output and "not sent" in results[2].output
    assert "may or may not" in results[3].output
    assert invocations(dies.marks) == ["die mid-call"]  # it was sent and ran
    assert invocations(down.marks) == []
    assert invocations(local) == ["touch before", "touch after"]


async def test_an_http_server_killed_between_calls_is_unavailable_not_a_crash(
    workspace: Path, tmp_path: Path, http_servers: list[HttpServer]
) -> None:
    web = HttpServer(tmp_path / "web")
    http_servers.append(web)
    config = Config.model_validate({"mcp": {"servers": {"web": {"url": web.url}}}})
    async with runtime(workspace, tmp_path, config) as rt:
        session = rt.open_session()
        first = await rt.call(session, "mcp__web__touch", {"tag": "one"})
        web.kill()
        second = await rt.call(session, "mcp__web__touch", {"tag": "two"})
        read = await rt.call(session, "read", {"path": "."})
    assert first.outcome is Outcome.OK
    assert (second.outcome, second.block_kind) == (Outcome.BLOCKED, BlockKind.UNAVAILABLE)
    assert read.outcome is Outcome.OK
    assert invocations(web.marks) == ["touch one"]


async def test_a_stdio_server_known_dead_is_blocked_unavailable(
    workspace: Path, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    config = Config.model_validate({"mcp": {"servers": {"local": stdio_server(marks)}}})
    config.replay.require_inspection = False
    async with runtime(workspace, tmp_path, config) as rt:
        session = rt.open_session()
        died = await rt.call(session, "mcp__local__die", {"tag": "x"})
        after = await rt.call(session, "mcp__local__touch", {"tag": "y"})
    assert died.outcome is Outcome.UNCERTAIN
    assert (after.outcome, after.block_kind) == (Outcome.BLOCKED, BlockKind.UNAVAILABLE)
    assert invocations(marks) == ["die x"]


# 3. Results keep what the server sent -----------------------------------------------


async def test_a_result_that_breaks_its_output_schema_is_an_error_with_the_servers_text(
    workspace: Path, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    config = Config.model_validate({"mcp": {"servers": {"f": stdio_server(marks)}}})
    async with runtime(workspace, tmp_path, config) as rt:
        session = rt.open_session()
        result = await rt.call(session, "mcp__f__broken_output", {"tag": "t"})
        row = {r.call_id: r for r in rt.store.calls(session.session_id)}[result.call_id]
    assert result.outcome is Outcome.ERROR and row.outcome == "error"
    assert row.result is not None and "counted many things" in row.result
    assert "outputSchema" in row.result and "count" in row.result
    assert invocations(marks) == ["broken_output t"]


async def test_structured_content_is_stored_and_media_are_saved_as_named_artifacts(
    workspace: Path, tmp_path: Path
) -> None:
    from mcp_fault_server import PNG, WAV  # pyright: ignore[reportMissingImports]

    marks = tmp_path / "marks"
    config = Config.model_validate({"mcp": {"servers": {"f": stdio_server(marks)}}})
    async with runtime(workspace, tmp_path, config) as rt:
        session = rt.open_session()
        result = await rt.call(session, "mcp__f__rich", {"tag": "t"})
        row = {r.call_id: r for r in rt.store.calls(session.session_id)}[result.call_id]
        artifacts_root = rt.store.artifacts_root
    assert result.outcome is Outcome.OK and row.result is not None
    assert "two files" in row.result
    # The text and the structured content differ: both are given, each labelled.
    assert row.result.startswith("[text content]\ntwo files")
    assert "\n[structured content]\n{" in row.result
    structured = row.result[row.result.index("{") : row.result.rindex("}") + 1]
    assert json.loads(structured) == {"files": 2, "names": ["a.txt", "b.txt"]}
    saved = [Path(p) for p in row.result.split() if p.startswith(str(artifacts_root))]
    saved = [Path(str(p).rstrip(")],.")) for p in saved]
    assert sorted(p.read_bytes() for p in saved) == sorted([PNG, WAV])
    assert {p.suffix for p in saved} == {".png", ".wav"}


async def test_a_result_whose_structured_content_repeats_its_text_is_given_once(
    workspace: Path, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    config = Config.model_validate(
        {
            "mcp": {"servers": {"f": stdio_server(marks)}},
            "tool_output": {"max_bytes": 60_000, "max_lines": 3000},
        }
    )
    async with runtime(workspace, tmp_path, config) as rt:
        session = rt.open_session()
        result = await rt.call(session, "mcp__f__file", {"tag": "t"})
    body = "".join(f"line {n} of the file\n" for n in range(2000))
    assert result.outcome is Outcome.OK, result.output
    # About 42 KB: one copy fits the limit; two would have been cut.
    assert result.output.count("line 1999 of the file") == 1
    assert result.output.rstrip("\n") == body.rstrip("\n")
    assert "[structured content]" not in result.output


def test_zuno_batch_goes_on_when_an_http_server_dies_mid_call(
    workspace: Path, tmp_path: Path, http_servers: list[HttpServer]
) -> None:
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    dies = HttpServer(tmp_path / "dies")
    http_servers.append(dies)
    local = tmp_path / "local"
    # The user's file: always trusted, unlike a workspace zuno.json.
    servers = {"dies": {"url": dies.url}, "local": stdio_server(local)}
    user_file = Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"
    user_file.write_text(json.dumps({"mcp": {"servers": servers}}))
    steps = workspace / "steps.json"
    steps.write_text(
        json.dumps(
            [
                {"tool": "read", "args": {"path": "notes.txt"}},
                {"tool": "mcp__local__touch", "args": {"tag": "cli"}},
                {"tool": "mcp__dies__die", "args": {"tag": "cli"}},
                {"tool": "grep", "args": {"pattern": "beta"}},
            ]
        )
    )
    db = tmp_path / "cli.db"
    proc = subprocess.run(
        [sys.executable, "-m", "zuno", "batch", str(steps), "--yes", "--json"],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(db)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1, proc.stderr  # one call is not ok
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT tool, outcome FROM calls ORDER BY idx").fetchall()
    assert rows == [
        ("read", "ok"),
        ("mcp__local__touch", "ok"),
        ("mcp__dies__die", "uncertain"),
        ("grep", "ok"),
    ]
    assert invocations(dies.marks) == ["die cli"] and invocations(local) == ["touch cli"]


def test_an_http_server_down_at_startup_is_one_warning(workspace: Path, tmp_path: Path) -> None:
    """Its tools are unavailable; every other call still works (issue 11)."""
    down = f"http://127.0.0.1:{free_port()}/mcp"
    user_file = Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"
    user_file.write_text(json.dumps({"mcp": {"servers": {"down": {"url": down}}}}))
    proc = subprocess.run(
        [sys.executable, "-m", "zuno", "call", "read", '{"path": "."}', "--json"],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(tmp_path / "cli.db")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "'down'" in line]
    assert len(warnings) == 1 and "could not connect" in warnings[0], proc.stderr
    assert json.loads(proc.stdout)["outcome"] == "ok"
