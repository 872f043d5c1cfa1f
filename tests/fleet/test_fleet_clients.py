"""A worker keeps one model client for all the sessions it runs (one connection, kept alive).

A new SDK client per session meant a new connection (and a TLS handshake on a
real endpoint) for every session, and the client's construction each time.
Judged from the model server's side: the client port of every request.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fleet_model import FleetModelServer, prompt_for

from zuno.durability.store import open_store
from zuno.fleet.worker import submit

ZUNO = [sys.executable, "-m", "zuno"]


def test_a_worker_sends_every_sessions_requests_over_one_connection(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "marks").mkdir(parents=True)
    db = str(tmp_path / "fleet.db")
    store = open_store(db)
    try:
        ids = [
            submit(
                store,
                prompt_for(task),
                workspace=workspace,
                agent="build",
                model="openai:fake-model",
                approve=True,
            )
            for task in (1, 2, 3)
        ]
    finally:
        store.close()
    with FleetModelServer(delay=0.0) as model:
        env = {
            **os.environ,
            "ZUNO_DB": db,
            "OPENAI_BASE_URL": model.openai_base_url,
            "OPENAI_API_KEY": "sk-fleet",
        }
        run = subprocess.run(
            [*ZUNO, "worker", "--max-sessions", "3"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr
        ports = list(model.client_ports)
        tasks = [_task(body) for body in model.requests]
    store = open_store(db)
    try:
        states = [store.get_session(i) for i in ids]
        assert [s.state if s else None for s in states] == ["done", "done", "done"]
    finally:
        store.close()
    assert len(ports) == 9  # three sessions of three model requests each
    # One connection carried the requests of several sessions (a client per session
    # gave each session a connection of its own; one reconnect may happen on a slow day).
    by_port: dict[int, set[str]] = {}
    for port, task in zip(ports, tasks, strict=True):
        by_port.setdefault(port, set()).add(task)
    assert len(by_port) <= 2, by_port
    assert max(len(seen) for seen in by_port.values()) >= 2, by_port


def _task(body: dict[str, Any]) -> str:
    """The task a model request belongs to (its first user message names it)."""
    messages: list[dict[str, Any]] = body.get("messages") or []
    first = next(m for m in messages if m.get("role") == "user")
    return str(first.get("content"))
