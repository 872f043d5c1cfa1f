"""``proxy`` network mode beyond ``shell``'s foreground: interactive processes
(``exec_command``) and background jobs get the same proxy and ledger.

The server is local (127.0.0.1 on the host), reachable from a command's own
namespace only through its proxy, as ``localhost`` with ``127.0.0.1`` allowed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from egress_servers import Served, served
from zuno.config.loading import Config
from zuno.policy.approvals import CallbackApprover
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

KINDS = ["bubblewrap", "landlock"]
BLOB = 200_000
DENIED = "denied.example.org"
EXEC_TOOLS = ("exec_command", "write_stdin", "exec_poll", "exec_kill")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Served]:
    root = tmp_path / "www"
    root.mkdir()
    (root / "blob").write_bytes(os.urandom(BLOB))
    with served(root) as state:
        yield state


def _runtime(workspace: Path, db: Path, kind: str) -> Runtime:
    sandbox = {"kind": kind, "network": "proxy", "network_allow": ["localhost", "127.0.0.1"]}
    data = {"tools": dict.fromkeys(EXEC_TOOLS, True), "sandbox": sandbox}
    return Runtime(
        workspace,
        config=Config.model_validate(data),
        db_path=db,
        approver=CallbackApprover(lambda request: True),
    )


def _get(url: str) -> str:
    return f"curl -sS -o /dev/null -w 'status %{{http_code}}\\n' {url}"


def _decisions(data: dict[str, Any] | None) -> list[tuple[str, str]]:
    assert data is not None
    return [(r["host"], r["decision"]) for r in data["egress"]]


@pytest.mark.parametrize("kind", KINDS)
async def test_an_interactive_process_reaches_allowed_hosts_through_its_own_proxy(
    workspace: Path, tmp_path: Path, server: Served, kind: str
) -> None:
    """The proxy lives as long as the process, across calls; each call reports the
    connections that ended since the previous one, and a refusal's reason."""
    allowed = _get(f"http://localhost:{server.port}/blob")
    denied = _get(f"http://{DENIED}/x")
    command = f"read a; {allowed}; read b; {denied}; echo done"
    async with _runtime(workspace, tmp_path / "z.db", kind) as rt:
        s = rt.open_session()
        started = await rt.call(s, "exec_command", {"command": command, "tty": False})
        assert started.data is not None and started.data["waiting_for_input"], started.output
        assert _decisions(started.data) == []
        first = await rt.call(s, "write_stdin", {"session": 1, "chars": "\n", "yield_ms": 20000})
        assert "status 200" in first.output, first.output
        assert _decisions(first.data) == [("localhost", "allowed")]
        assert first.data is not None
        row = first.data["egress"][0]
        assert abs(row["bytes_down"] - BLOB) <= BLOB / 100
        second = await rt.call(s, "write_stdin", {"session": 1, "chars": "\n", "yield_ms": 20000})
        assert "done" in second.output, second.output
        assert _decisions(second.data) == [(DENIED, "refused")]
        assert f"[blocked network: {DENIED}:80 is not in sandbox.network_allow" in second.output
        finished = [e.data for e in rt.store.events(s.session_id) if e.kind == "call.finished"]
    # Stored beside each call, as a shell command's ledger is.
    assert [[r["decision"] for r in f.get("egress", [])] for f in finished] == [
        [],
        ["allowed"],
        ["refused"],
    ]
    assert server.requests == 1


@pytest.mark.parametrize("kind", KINDS)
async def test_a_background_job_reaches_allowed_hosts_and_says_why_others_were_refused(
    workspace: Path, tmp_path: Path, server: Served, kind: str
) -> None:
    command = f"{_get(f'http://localhost:{server.port}/blob')}; {_get(f'http://{DENIED}/x')}"
    async with _runtime(workspace, tmp_path / "z.db", kind) as rt:
        s = rt.open_session()
        started = await rt.call(s, "shell", {"command": command, "background": True})
        assert started.data is not None
        job = started.data["job_id"]
        waited = await rt.call(s, "bg", {"action": "wait", "job_id": job, "timeout": 60})
        assert "succeeded" in waited.output, waited.output
        output = await rt.call(s, "bg", {"action": "output", "job_id": job})
        ledger = [
            e
            for e in rt.store.events(s.session_id)
            if e.kind == "job.egress" and e.call_id == started.call_id
        ]
    assert "status 200" in output.output, output.output
    assert f"[blocked network: {DENIED}:80 is not in sandbox.network_allow" in output.output
    (event,) = ledger
    assert event.data["job_id"] == job
    assert _decisions(event.data) == [("localhost", "allowed"), (DENIED, "refused")]
    assert abs(event.data["egress"][0]["bytes_down"] - BLOB) <= BLOB / 100
    assert server.requests == 1
    # The command line reads the job's ledger under the call that started it.
    db = str(tmp_path / "z.db")
    shown = json.loads(_zuno("show", s.session_id, "--json", "--db", db))
    (call,) = [c for c in shown["calls"] if c["call_id"] == started.call_id]
    assert [r["decision"] for r in call["egress"]] == ["allowed", "refused"]
    suggested = _zuno("network", "suggest", s.session_id, "--db", db)
    assert f'"{DENIED}:80",  # refused 1x' in suggested


def _zuno(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "zuno", *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
