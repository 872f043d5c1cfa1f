"""How the lsp tool and client fail: timeouts, crashes, broken framing, startup errors.

A small fake server (``fake_lsp_server.py``) plays the misbehaving part; it
logs the methods it receives and the process ids it ran as.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from lsp_support import FAKE_SERVER, fake_server

from zuno.config.lsp import LspServerSettings
from zuno.core.declarations import Outcome
from zuno.dispatch.dispatcher import CallResult
from zuno.integrations.lsp.client import LspClient
from zuno.integrations.lsp.errors import RequestTimeout
from zuno.integrations.lsp.pool import LSP_SERVERS
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

HOVER = {"action": "hover", "path": "m.fake", "line": 1, "column": 1}


@pytest.fixture
def logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    log, pids = tmp_path / "methods.log", tmp_path / "pids.log"
    monkeypatch.setenv("FAKE_LSP_LOG", str(log))
    monkeypatch.setenv("FAKE_LSP_PID", str(pids))
    return log, pids


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def call(runtime: Runtime, args: dict[str, Any]) -> CallResult:
    return await runtime.call(runtime.open_session(), "lsp", args)


def fake_runtime(make_runtime: Any, ws: Path, mode: str, attempts: int = 1, **lsp: Any) -> Runtime:
    return make_runtime(
        ws,
        lsp={"servers": fake_server(mode), "request_timeout": 0.5, **lsp},
        replay={"attempts": attempts, "base_delay": 0.0},
    )


async def test_an_answer_comes_back(
    fake_workspace: Path, make_runtime: Any, logs: tuple[Path, Path]
) -> None:
    rt = fake_runtime(make_runtime, fake_workspace, "ok")
    result = await call(rt, HOVER)
    assert result.outcome is Outcome.OK and result.output == "fake hover"
    methods = lines(logs[0])
    assert methods[:3] == ["initialize", "initialized", "textDocument/didOpen"]


async def test_a_request_without_answer_is_transient_and_cancelled(
    fake_workspace: Path, make_runtime: Any, logs: tuple[Path, Path]
) -> None:
    rt = fake_runtime(make_runtime, fake_workspace, "hang", attempts=2)
    result = await call(rt, HOVER)
    assert result.outcome is Outcome.ERROR
    assert "textDocument/hover got no answer within 0.5s" in result.output
    assert "try again" in result.output
    # Safe, so the dispatcher tried again; each abandoned request was cancelled.
    assert result.attempt == 2
    # The fake server logs the second cancellation when it gets to read it.
    with anyio.move_on_after(10):
        while lines(logs[0]).count("$/cancelRequest") < 2:  # noqa: ASYNC110 - a file has no event
            await anyio.sleep(0.02)
    assert lines(logs[0]).count("$/cancelRequest") == 2
    # The server itself is still fine and kept.
    (client,) = LSP_SERVERS.clients(fake_workspace)
    assert client.alive


async def test_a_server_that_dies_is_started_again(
    fake_workspace: Path, make_runtime: Any, logs: tuple[Path, Path]
) -> None:
    rt = fake_runtime(make_runtime, fake_workspace, "crash", attempts=2)
    result = await call(rt, HOVER)
    assert result.outcome is Outcome.ERROR
    assert "exited" in result.output and "the next call starts it again" in result.output
    pids = lines(logs[1])
    assert len(pids) == 2 and pids[0] != pids[1]


async def test_output_that_is_not_lsp_stops_the_server(
    fake_workspace: Path, make_runtime: Any, logs: tuple[Path, Path]
) -> None:
    rt = fake_runtime(make_runtime, fake_workspace, "garbage")
    result = await call(rt, HOVER)
    assert result.outcome is Outcome.ERROR
    assert "broke the protocol" in result.output and "this is not a header" in result.output
    (pid,) = lines(logs[1])
    assert not _running(int(pid))


async def test_configuration_requests_are_answered_from_settings(
    fake_workspace: Path, make_runtime: Any, logs: tuple[Path, Path]
) -> None:
    servers = fake_server("config")
    servers[".fake"]["settings"] = {"fake": {"answer": 42}}
    rt = make_runtime(fake_workspace, lsp={"servers": servers, "request_timeout": 5})
    result = await call(rt, HOVER)
    assert result.outcome is Outcome.OK and result.output == "configured: 42"


async def test_a_server_that_cannot_start_names_command_stderr_and_fix(
    fake_workspace: Path, make_runtime: Any, logs: tuple[Path, Path]
) -> None:
    rt = fake_runtime(make_runtime, fake_workspace, "fail-start", attempts=3)
    result = await call(rt, HOVER)
    assert result.outcome is Outcome.ERROR
    assert f"`{sys.executable} {FAKE_SERVER} fail-start`" in result.output
    assert "cannot start without a license" in result.output
    assert "To install or fix it: no way" in result.output
    assert result.attempt == 1  # a startup failure is not transient
    assert LSP_SERVERS.clients(fake_workspace) == []


async def test_an_action_the_server_lacks_is_an_error(
    fake_workspace: Path, make_runtime: Any, logs: tuple[Path, Path]
) -> None:
    rt = fake_runtime(make_runtime, fake_workspace, "ok")
    result = await call(rt, {"action": "symbols", "path": "m.fake"})
    assert result.outcome is Outcome.ERROR
    assert "does not support symbols" in result.output


async def test_close_sends_shutdown_and_exit(
    fake_workspace: Path, make_runtime: Any, logs: tuple[Path, Path]
) -> None:
    rt = fake_runtime(make_runtime, fake_workspace, "ok")
    assert (await call(rt, HOVER)).outcome is Outcome.OK
    (client,) = LSP_SERVERS.clients(fake_workspace)
    await LSP_SERVERS.aclose(fake_workspace)
    assert lines(logs[0])[-2:] == ["shutdown", "exit"]
    assert not client.alive and LSP_SERVERS.clients(fake_workspace) == []
    (pid,) = lines(logs[1])
    assert not _running(int(pid))


def _server(mode: str) -> LspServerSettings:
    return LspServerSettings(command=[sys.executable, str(FAKE_SERVER), mode], sandbox=False)


async def test_many_waiters_share_one_reader(fake_workspace: Path) -> None:
    settings = _server("ok")
    client = LspClient(settings.command, fake_workspace, settings)
    await client.start(timeout=30)
    try:
        doc = await client.open_document(fake_workspace / "m.fake", "fake")
        params = {"textDocument": {"uri": doc.uri}, "position": {"line": 0, "character": 0}}
        answers: list[Any] = []

        async def ask(cancel_early: bool) -> None:
            with anyio.move_on_after(0 if cancel_early else 30):
                answers.append(await client.request("textDocument/hover", params, timeout=30))

        async with anyio.create_task_group() as tg:
            for i in range(30):
                # Every third caller gives up at once: the others must still get answers.
                tg.start_soon(ask, i % 3 == 0)
        assert len(answers) == 20
        assert all(a["contents"]["value"] == "fake hover" for a in answers)
        # Late answers to the abandoned requests were dropped, not misdelivered.
        again = await client.request("textDocument/hover", params, timeout=30)
        assert again["contents"]["value"] == "fake hover"
    finally:
        await client.aclose()
    assert not client.alive


async def test_a_request_timeout_on_the_client(fake_workspace: Path) -> None:
    settings = _server("hang")
    client = LspClient(settings.command, fake_workspace, settings)
    await client.start(timeout=30)
    try:
        with pytest.raises(RequestTimeout, match=r"within 0\.2s"):
            await client.request("textDocument/hover", {}, timeout=0.2)
        assert client.alive
    finally:
        await client.aclose()


def test_a_client_serves_later_event_loops(fake_workspace: Path) -> None:
    settings = _server("ok")
    client = LspClient(settings.command, fake_workspace, settings)

    async def start() -> None:
        await client.start(timeout=30)

    async def hover() -> Any:
        return await client.request("textDocument/hover", {}, timeout=30)

    anyio.run(start)
    try:
        for _ in range(3):
            assert anyio.run(hover)["contents"]["value"] == "fake hover"
    finally:
        anyio.run(client.aclose)


def test_servers_die_with_the_process(fake_workspace: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "pids.log"
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        import anyio
        from zuno.integrations.lsp import LSP_SERVERS, LspServerSettings

        async def main():
            settings = LspServerSettings(
                command=[sys.executable, {str(FAKE_SERVER)!r}, "ok"], sandbox=False
            )
            await LSP_SERVERS.client(
                settings.command, Path({str(fake_workspace)!r}), settings, startup_timeout=30
            )

        anyio.run(main)
        # Exits without closing anything.
        """
    )
    env = {**os.environ, "FAKE_LSP_PID": str(pid_file)}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=60)
    (pid,) = lines(pid_file)
    deadline = time.monotonic() + 30
    while _running(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(int(pid))


def _running(pid: int) -> bool:
    """Whether pid is a live process (a zombie waiting to be reaped is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
