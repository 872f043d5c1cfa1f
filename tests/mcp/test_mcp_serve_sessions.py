"""``zuno mcp serve`` under concurrent requests: one session per connection, the
Exclusive barrier and the inspection rule across requests, configured servers listed,
and a port in use refused cleanly.

Real processes: ``python -m zuno mcp serve`` over stdio and streamable HTTP, real
MCP clients calling it, judged from the store's rows (SQLite, read directly).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import sqlite3
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

pytestmark = pytest.mark.anyio

FAULT = Path(__file__).with_name("mcp_fault_server.py")

# Each command waits (bounded) until all three have started: when they overlap they
# meet at once; when they run one at a time each waits out its bound alone.
RENDEZVOUS = (
    "touch started.{n}; for i in $(seq 40); do "
    '[ "$(ls started.* | wc -l)" -ge 3 ] && break; sleep 0.05; done; echo done {n}'
)


def env_for(db: Path) -> dict[str, str]:
    return {**os.environ, "ZUNO_DB": str(db)}


def serve_params(workspace: Path, db: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "zuno", "mcp", "serve", "-w", str(workspace), *extra],
        env=env_for(db),
    )


def rows(db: Path) -> list[dict[str, Any]]:
    """Every call row, in the order they started."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        conn.row_factory = sqlite3.Row
        found = conn.execute(
            "SELECT session_id, tool, outcome, block_kind, started_at, finished_at"
            " FROM calls ORDER BY started_at"
        ).fetchall()
    return [dict(r) for r in found]


def session_count(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


def assert_no_overlap(calls: list[dict[str, Any]]) -> None:
    spans = sorted((c["started_at"], c["finished_at"]) for c in calls)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, f"Exclusive calls overlapped: {spans}"


async def three_shells(client: Client) -> list[types.CallToolResult]:
    results: list[types.CallToolResult | None] = [None] * 3

    async def one(n: int) -> None:
        results[n] = await client.call_tool("shell", {"command": RENDEZVOUS.format(n=n)})

    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(one, n)
    return [r for r in results if r is not None]


@pytest.fixture
def project(workspace: Path, tmp_path: Path) -> tuple[Path, Path]:
    (workspace / "notes.txt").write_text("alpha\n")
    return workspace, tmp_path / "serve.db"


async def test_concurrent_exclusive_calls_over_stdio_never_overlap(
    project: tuple[Path, Path],
) -> None:
    workspace, db = project
    async with Client(serve_params(workspace, db, "--yes")) as client:
        results = await three_shells(client)
    assert all(not r.is_error for r in results), [text_of(r) for r in results]
    shells = [r for r in rows(db) if r["tool"] == "shell"]
    assert len(shells) == 3 and {r["outcome"] for r in shells} == {"ok"}
    assert len({r["session_id"] for r in shells}) == 1  # one connection, one session
    assert_no_overlap(shells)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            assert proc.stderr is not None
            raise AssertionError(f"zuno mcp serve exited: {proc.stderr.read().decode()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


@pytest.fixture
def http_serve(project: tuple[Path, Path]) -> Iterator[str]:
    workspace, db = project
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zuno",
            "mcp",
            "serve",
            "--port",
            str(port),
            "--yes",
            "-w",
            str(workspace),
        ],
        env=env_for(db),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_listening(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


async def test_concurrent_exclusive_calls_over_http_never_overlap_one_session_per_client(
    project: tuple[Path, Path], http_serve: str
) -> None:
    _workspace, db = project
    async with Client(http_serve) as first:
        results = await three_shells(first)
        async with Client(http_serve) as second:
            other = await second.call_tool("read", {"path": "notes.txt"})
    assert all(not r.is_error for r in results), [text_of(r) for r in results]
    assert not other.is_error
    shells = [r for r in rows(db) if r["tool"] == "shell"]
    assert len(shells) == 3
    assert len({r["session_id"] for r in shells}) == 1
    assert_no_overlap(shells)
    (read,) = [r for r in rows(db) if r["tool"] == "read"]
    assert read["session_id"] != shells[0]["session_id"]  # another client, another session


async def test_the_inspection_rule_holds_across_concurrent_requests(
    project: tuple[Path, Path],
) -> None:
    workspace, db = project
    hang = "touch hang.started; sleep 60"
    async with Client(serve_params(workspace, db, "--yes")) as client:
        outcomes: dict[str, types.CallToolResult] = {}

        async def call(key: str, tool: str, arguments: dict[str, Any]) -> None:
            outcomes[key] = await client.call_tool(tool, arguments)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "hang", "shell", {"command": hang, "timeout": 2})
            with anyio.fail_after(120):  # a bound on the wait, not a timing assertion
                while not (workspace / "hang.started").exists():  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            # Sent while the hanging command runs: each waits for it, then meets
            # its failure, which nothing has inspected.
            tg.start_soon(call, "w1", "write", {"path": "one.txt", "content": "1"})
            tg.start_soon(call, "w2", "write", {"path": "two.txt", "content": "2"})
        look = await client.call_tool("read", {"path": "notes.txt"})
        after = await client.call_tool("write", {"path": "three.txt", "content": "3"})
    assert outcomes["hang"].is_error, text_of(outcomes["hang"])
    for key in ("w1", "w2"):
        meta = outcomes[key].meta
        assert meta is not None
        assert meta["zuno/call"]["block_kind"] == "denied", text_of(outcomes[key])
    assert not (workspace / "one.txt").exists() and not (workspace / "two.txt").exists()
    assert not look.is_error and not after.is_error, text_of(after)
    assert (workspace / "three.txt").read_text() == "3"
    writes = [r for r in rows(db) if r["tool"] == "write"]
    assert [r["outcome"] for r in writes] == ["blocked", "blocked", "ok"]


async def test_configured_servers_tools_are_listed_with_open_world_hints(
    project: tuple[Path, Path], tmp_path: Path
) -> None:
    workspace, db = project
    marks = tmp_path / "marks"
    marks.mkdir()
    server = {
        "command": sys.executable,
        "args": [str(FAULT)],
        "env": {"FAULT_MARKS": str(marks)},
        "sandbox": False,  # it leaves marks outside the workspace
    }
    # The user's own file: always trusted, unlike a workspace zuno.json.
    user_file = Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"
    user_file.write_text(json.dumps({"mcp": {"servers": {"fault": server}}}))
    async with Client(serve_params(workspace, db, "--yes")) as client:
        listing = {t.name: t for t in (await client.list_tools()).tools}
        touched = await client.call_tool("mcp__fault__touch", {"tag": "served"})
    assert {"read", "mcp__fault__touch", "mcp__fault__git_add"} <= set(listing)
    assert not touched.is_error and (marks / "calls.log").read_text() == "touch served\n"
    hints = {name: tool.annotations for name, tool in listing.items()}
    assert all(h is not None for h in hints.values())
    open_world = {name: h.open_world_hint for name, h in hints.items() if h is not None}
    assert open_world["read"] is False and open_world["write"] is False
    assert open_world["webfetch"] is True
    assert open_world["mcp__fault__touch"] is True
    assert open_world["shell"] is False  # the sandbox's network is off by default
    assert listing["mcp__fault__git_add"].annotations is not None
    assert listing["mcp__fault__git_add"].annotations.idempotent_hint is False  # Never here


def test_a_port_in_use_is_one_line_exit_2_and_leaves_no_session(tmp_path: Path) -> None:
    db = tmp_path / "serve.db"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "zuno", "mcp", "serve", "--port", str(port)],
            cwd=tmp_path,
            env=env_for(db),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert str(port) in proc.stderr and "in use" in proc.stderr
    assert session_count(db) == 0
