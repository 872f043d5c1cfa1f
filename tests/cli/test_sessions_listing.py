"""``zuno sessions``, direct-call sessions and session prefixes, through the real command."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from truth_cli import MODEL, ZUNO, FakeModelServer, Reply, Zuno, session_from

from zuno.agent.loop import AgentLoop, provider_for
from zuno.config.loading import Config
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime


@pytest.fixture
def model_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "listing.db"


@pytest.fixture
def zuno(db: Path, model_server: FakeModelServer) -> Zuno:
    return Zuno(db, model_server)


@pytest.fixture
def two_folders(tmp_path: Path) -> tuple[Path, Path]:
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / "notes.txt").write_text(f"{folder.name}\n")
    return first, second


def _ids(rows: list[dict[str, object]]) -> set[str]:
    return {str(r["session_id"]) for r in rows}


def test_sessions_lists_the_current_workspace_unless_all(
    zuno: Zuno, two_folders: tuple[Path, Path]
) -> None:
    first, second = two_folders
    a = zuno.json(first, "call", "read", '{"path": "notes.txt"}')["session_id"]
    b = zuno.json(second, "call", "read", '{"path": "notes.txt"}')["session_id"]
    assert a != b
    assert _ids(zuno.json(first, "sessions")) == {a}
    assert _ids(zuno.json(second, "sessions")) == {b}
    assert _ids(zuno.json(first, "sessions", "--workspace", str(second))) == {b}
    assert _ids(zuno.json(first, "sessions", "--all")) == {a, b}
    text = zuno.ok(first, "sessions").stdout
    assert a in text and b not in text
    assert str(first.resolve()) in text  # says which workspace it lists


def test_every_direct_call_of_a_workspace_joins_one_session(
    zuno: Zuno, two_folders: tuple[Path, Path], tmp_path: Path
) -> None:
    first, second = two_folders
    one = zuno.json(first, "call", "read", '{"path": "notes.txt"}')["session_id"]
    two = zuno.json(first, "call", "glob", '{"pattern": "*.txt"}')["session_id"]
    batch = tmp_path / "batch.json"
    batch.write_text(json.dumps([{"tool": "read", "args": {"path": "notes.txt"}}]))
    three = zuno.json(first, "batch", str(batch))[0]["session_id"]
    assert one == two == three
    (listed,) = zuno.json(first, "sessions")
    assert listed["session_id"] == one and listed["calls"] == 3
    fresh = zuno.json(first, "call", "read", '{"path": "notes.txt"}', "--new-session")
    assert fresh["session_id"] != one
    # The newest direct-call session is the one later calls join.
    again = zuno.json(first, "call", "read", '{"path": "notes.txt"}')["session_id"]
    assert again == fresh["session_id"]
    assert len(zuno.json(first, "sessions")) == 2
    # Another workspace has its own.
    other = zuno.json(second, "call", "read", '{"path": "notes.txt"}')["session_id"]
    assert other not in {one, fresh["session_id"]}


def test_sessions_shows_title_and_model(
    zuno: Zuno, db: Path, workspace: Path, model_server: FakeModelServer
) -> None:
    model_server.enqueue(Reply(text="Fixed."))
    run = zuno.ok(workspace, "run", "Fix the flaky test\nIt fails on Tuesdays.", "--model", MODEL)
    titled = session_from(run.stderr)
    # A session opened through the Python API with no title: its prompt's first line is shown.
    model_server.enqueue(Reply(text="Done."))
    untitled = _api_session_without_title(workspace, db, model_server, "Tidy the imports\nAll.")
    rows = {r["session_id"]: r for r in zuno.json(workspace, "sessions")}
    assert rows[titled]["title"] == "Fix the flaky test"
    assert rows[titled]["model"] == MODEL
    assert rows[untitled]["title"] == "Tidy the imports"
    assert rows[untitled]["model"] == "fake:test-model"
    lines = zuno.ok(workspace, "sessions").stdout.splitlines()
    header = next(line for line in lines if line.startswith("session"))
    assert "title" in header and "model" in header
    assert "worker" in header and "state" in header  # session leases
    row = next(line for line in lines if titled in line)
    assert "Fix the flaky test" in row and MODEL in row and "Tuesdays" not in row
    assert f" {rows[titled]['state']} " in row and rows[titled]["state"]
    assert "Tidy the imports" in next(line for line in lines if untitled in line)


def _api_session_without_title(
    workspace: Path, db: Path, server: FakeModelServer, prompt: str
) -> str:
    import anyio

    providers = {"fake": {"kind": "openai", "base_url": server.openai_base_url, "attempts": 1}}
    rt = Runtime(
        workspace,
        config=Config.model_validate({"providers": providers}),
        db_path=db,
        approver=ApproveAll(),
    )

    async def turn() -> str:
        state = rt.open_session(agent="build", model="fake:test-model")
        provider = provider_for(rt, "fake:test-model")
        try:
            async with rt:
                await AgentLoop(rt, state, provider).run(prompt)
        finally:
            await provider.aclose()
        return state.session_id

    try:
        return anyio.run(turn)
    finally:
        rt.close()


def test_an_ambiguous_prefix_says_so_and_lists_the_matches(
    zuno: Zuno, two_folders: tuple[Path, Path]
) -> None:
    first, second = two_folders
    a = zuno.json(first, "call", "read", '{"path": "notes.txt"}')["session_id"]
    b = zuno.json(second, "call", "read", '{"path": "notes.txt"}')["session_id"]
    for command in (
        ("show", "ses_"),
        ("resume", "ses_"),
        ("call", "read", '{"path": "notes.txt"}', "--session", "ses_"),
    ):
        proc = zuno.run(first, *command)
        assert proc.returncode == 2, (command, proc.stderr)
        assert "ambiguous" in proc.stderr and "no session" not in proc.stderr, proc.stderr
        assert a in proc.stderr and b in proc.stderr
        assert "Traceback" not in proc.stderr
    # A unique prefix still works, and an unknown one still says there is none.
    assert zuno.json(first, "show", a[:-3])["session_id"] == a
    missing = zuno.run(first, "show", "ses_nothing_like_it")
    assert missing.returncode == 2 and "no session" in missing.stderr


def test_a_direct_call_beside_a_running_one_opens_its_own_session(
    zuno: Zuno, workspace: Path
) -> None:
    """The workspace's session is leased to the running call: the second call is not refused."""
    (workspace / "notes.txt").write_text("notes\n")
    waiting = (
        "echo started > started; "
        "for i in $(seq 1200); do [ -f go ] && break; sleep 0.05; done; echo done"
    )
    first = subprocess.Popen(
        [*ZUNO, "call", "shell", json.dumps({"command": waiting}), "--yes", "--json"],
        cwd=workspace,
        env=zuno.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(1200):
            if (workspace / "started").exists() or first.poll() is not None:
                break
            time.sleep(0.05)
        assert (workspace / "started").exists(), first.communicate(timeout=60)
        second = zuno.run(workspace, "call", "read", '{"path": "notes.txt"}', "--json")
    finally:
        (workspace / "go").write_text("")
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert second.returncode == 0, second.stderr
    assert json.loads(out)["session_id"] != json.loads(second.stdout)["session_id"]
    # Later calls join the newest direct-call session of the workspace.
    third = zuno.json(workspace, "call", "read", '{"path": "notes.txt"}')
    assert third["session_id"] == json.loads(second.stdout)["session_id"]
