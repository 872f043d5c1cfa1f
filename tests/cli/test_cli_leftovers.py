"""Leftovers of issues 10 and 11, each through the real ``zuno`` command (a new process).

- ``zuno tools`` says why ``web_search`` is not offered (and ``--json`` carries it);
- plain ``zuno doctor`` prints the language server, trust, each MCP server and web_search;
- a denial printed by ``zuno call`` (no terminal) says how to allow the call;
- an error message keeps the quotes it ends with;
- ``--wait SECONDS`` lets ``zuno resume`` and ``zuno call --session`` wait for a session
  another live process holds.

stdin is never a terminal here, and nothing is approved unless a test says ``--yes``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))

from fake_api import FakeModelServer, Reply

from zuno.config.trust import trust
from zuno.durability.store import SQLiteStore

ZUNO = Path(sys.executable).parent / "zuno"
BOUND = 120.0


def write_user(data: object) -> None:
    path = Path(os.environ["ZUNO_CONFIG_HOME"]) / "zuno.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "left.db"


def zuno(
    workspace: Path, db: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ZUNO), *args],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(db), **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=BOUND,
    )


# 1. zuno tools: why web_search is not offered ---------------------------------------------


def test_tools_says_why_web_search_is_not_offered(workspace: Path, db: Path) -> None:
    plain = zuno(workspace, db, "tools")
    assert plain.returncode == 0, plain.stderr
    (line,) = [x for x in plain.stdout.splitlines() if "web_search" in x]
    assert "not offered" in line and "web.search" in line, plain.stdout
    listed = zuno(workspace, db, "tools", "--json")
    body = json.loads(listed.stdout)
    assert "web_search" not in [row["name"] for row in body["tools"]]
    (withheld,) = body["withheld"]
    assert withheld["name"] == "web_search" and "web.search" in withheld["reason"]

    write_user({"web": {"search": {"kind": "searxng", "base_url": "http://127.0.0.1:9"}}})
    body = json.loads(zuno(workspace, db, "tools", "--json").stdout)
    assert "web_search" in [row["name"] for row in body["tools"]]
    assert body["withheld"] == []
    assert "not offered" not in zuno(workspace, db, "tools").stdout


# 2. zuno doctor, plain ---------------------------------------------------------------------


def test_plain_doctor_reports_language_server_trust_mcp_and_web_search(
    workspace: Path, db: Path
) -> None:
    missing = {"command": ["zuno-no-such-langserver", "--stdio"], "install": "pip install zls"}
    write_user(
        {
            "lsp": {"servers": {".py": missing}},
            "mcp": {"servers": {"ghost": {"command": "zuno-no-such-mcp-server"}}},
        }
    )
    (workspace / "zuno.json").write_text("{}")
    trust(workspace)
    proc = zuno(workspace, db, "doctor")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    (lsp,) = [x for x in lines if x.startswith("lsp:         .py:")]
    assert "MISSING" in lsp and "pip install zls" in lsp
    (mcp,) = [x for x in lines if x.startswith("mcp:")]
    assert "ghost" in mcp and "FAILED" in mcp
    (search,) = [x for x in lines if x.startswith("web_search:")]
    assert "not offered" in search
    (trusted,) = [x for x in lines if x.startswith("trust:")]
    assert "trusted" in trusted
    assert lines[-1].startswith("NOT OK")


# 3. a denial by zuno call says how to allow it --------------------------------------------


def test_a_denied_call_says_how_to_allow_it(workspace: Path, db: Path) -> None:
    args = ("call", "write", '{"path": "notes.md", "content": "hi\\n"}')
    denied = zuno(workspace, db, *args)
    assert denied.returncode == 1 and not (workspace / "notes.md").exists()
    hints = [x for x in denied.stderr.splitlines() if "--yes" in x]
    assert len(hints) == 1, denied.stderr
    assert "permission rule" in hints[0] and '"tool": "write"' in hints[0]
    assert '"pattern": "notes.md"' in hints[0]
    # The same hint with --json (stdout stays the result alone).
    as_json = zuno(workspace, db, *args, "--json")
    assert json.loads(as_json.stdout)["block_kind"] == "denied"
    assert "--yes" in as_json.stderr
    # The rule it names does allow the call.
    rule = {"tool": "write", "pattern": "notes.md", "action": "allow"}
    write_user({"permission": {"rules": [rule]}})
    allowed = zuno(workspace, db, *args)
    assert allowed.returncode == 0, allowed.stderr
    assert (workspace / "notes.md").read_text() == "hi\n"
    assert "--yes" not in allowed.stderr


def test_a_call_a_deny_rule_refuses_does_not_suggest_yes(workspace: Path, db: Path) -> None:
    write_user({"permission": {"rules": [{"tool": "write", "action": "deny"}]}})
    proc = zuno(workspace, db, "call", "write", '{"path": "a.md", "content": "x"}', "--yes")
    assert proc.returncode == 1 and not (workspace / "a.md").exists()
    assert "--yes" not in proc.stderr


# 4. error messages keep their quotes --------------------------------------------------------


def test_an_error_ending_in_a_quote_keeps_it(workspace: Path, db: Path) -> None:
    write_user({"agents": {"qa'": {}}})
    proc = zuno(workspace, db, "tools", "--agent", "nope")
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("known agents: build, explore, qa'"), proc.stderr


# 5. --wait for a session another process holds ----------------------------------------------


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


def _unfinished(db: Path, session_id: str) -> bool:
    store = SQLiteStore(db)
    try:
        return bool(store.unfinished_calls(session_id))
    finally:
        store.close()


def _hold(workspace: Path, db: Path, session_id: str) -> subprocess.Popen[str]:
    """A ``zuno call`` in the session whose command runs until the file ``go`` exists."""
    command = "while [ ! -f go ]; do sleep 0.05; done; echo released"
    holder = subprocess.Popen(
        [str(ZUNO), "call", "shell", json.dumps({"command": command}), "--yes", "-s", session_id],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(db)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + BOUND
    while not _unfinished(db, session_id):
        assert holder.poll() is None, holder.communicate()
        assert time.monotonic() < deadline, "the holder's call never started"
        time.sleep(0.05)
    return holder


def _read_until(stream: Any, needle: str) -> str:
    """Lines of ``stream`` up to the first holding ``needle`` (bounded by the stream's end)."""
    seen = ""
    for line in stream:
        seen += line
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} never came; saw:\n{seen}")


def test_resume_waits_for_a_held_session_with_wait(
    workspace: Path, db: Path, model_server: FakeModelServer
) -> None:
    env = {"OPENAI_BASE_URL": model_server.openai_base_url, "OPENAI_API_KEY": "sk-test"}
    made = zuno(workspace, db, "call", "glob", '{"pattern": "*"}', "--new-session", "--json")
    session_id = json.loads(made.stdout)["session_id"]
    holder = _hold(workspace, db, session_id)
    waiter: subprocess.Popen[str] | None = None
    try:
        resume = ("resume", session_id, "go on", "--model", "openai:fake-model")
        refused = zuno(workspace, db, *resume, env=env)
        assert refused.returncode == 2, refused.stderr
        assert "in use by worker" in refused.stderr and "--wait" in refused.stderr
        direct = zuno(workspace, db, "call", "glob", '{"pattern": "*"}', "--session", session_id)
        assert direct.returncode == 2 and "in use by worker" in direct.stderr
        assert model_server.requests == []

        model_server.enqueue(Reply(text="Carried on."))
        waiter = subprocess.Popen(
            [str(ZUNO), *resume, "--wait", "60"],
            cwd=workspace,
            env={**os.environ, "ZUNO_DB": str(db), **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert waiter.stderr is not None
        said = _read_until(waiter.stderr, "waiting")
        assert session_id in said and "60" in said
        assert model_server.requests == []  # still waiting: the holder has it
        (workspace / "go").write_text("")
        out, err = holder.communicate(timeout=BOUND)
        assert holder.returncode == 0 and "released" in out, err
        out, err = waiter.communicate(timeout=BOUND)
        assert waiter.returncode == 0, err
        assert "Carried on." in out and len(model_server.requests) == 1
    finally:
        for proc in (holder, waiter):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    store = SQLiteStore(db)
    try:
        kinds = [e.kind for e in store.events(session_id)]
    finally:
        store.close()
    # The resumed turn began after the holder's call had its result.
    assert kinds.index("agent.started") > max(
        i for i, k in enumerate(kinds) if k == "call.finished"
    )


def test_call_session_waits_with_wait(workspace: Path, db: Path) -> None:
    made = zuno(workspace, db, "call", "glob", '{"pattern": "*"}', "--new-session", "--json")
    session_id = json.loads(made.stdout)["session_id"]
    holder = _hold(workspace, db, session_id)
    wait = ("--session", session_id, "--wait", "60")
    waiter: subprocess.Popen[str] | None = None
    try:
        gave_up = zuno(
            workspace, db, "call", "glob", '{"pattern": "*"}', "-s", session_id, "--wait", "0.5"
        )
        assert gave_up.returncode == 2
        assert "waiting up to 0.5 s" in gave_up.stderr
        assert "gave up after waiting 0.5 s" in gave_up.stderr
        waiter = subprocess.Popen(
            [str(ZUNO), "call", "write", '{"path": "after.txt", "content": "x"}', "--yes", *wait],
            cwd=workspace,
            env={**os.environ, "ZUNO_DB": str(db)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert waiter.stderr is not None
        _read_until(waiter.stderr, "waiting")
        assert not (workspace / "after.txt").exists()
        (workspace / "go").write_text("")
        holder.communicate(timeout=BOUND)
        _, err = waiter.communicate(timeout=BOUND)
        assert waiter.returncode == 0, err
        assert (workspace / "after.txt").read_text() == "x"
    finally:
        for proc in (holder, waiter):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
