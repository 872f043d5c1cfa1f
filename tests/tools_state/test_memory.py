"""Memories: memory_propose through the dispatcher, the review CLI, the session-start text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from zuno.config.loading import Config
from zuno.core.declarations import BlockKind, Effect, Outcome
from zuno.durability.memory import (
    UnknownMemory,
    accepted_memories_text,
    decide_memory,
    list_memories,
    propose_memory,
)
from zuno.durability.store import open_store
from zuno.policy.approvals import DenyAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

ENABLED = {"memory": {"enabled": True}}


def make_runtime(workspace: Path, db: Path, **config: Any) -> Runtime:
    # DenyAll: proposing is user-mediated, so strict mode must not ask.
    return Runtime(workspace, config=Config.model_validate(config), db_path=db, approver=DenyAll())


def zuno(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ZUNO_DB": str(db)}
    return subprocess.run(
        [sys.executable, "-m", "zuno", "memory", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


async def test_memory_propose_appears_only_when_enabled(workspace: Path, tmp_path: Path) -> None:
    off = make_runtime(workspace, tmp_path / "a.db")
    assert "memory_propose" not in off.surface().names
    result = await off.call(off.open_session(), "memory_propose", {"text": "x"})
    assert result.block_kind is BlockKind.UNAVAILABLE
    on = make_runtime(workspace, tmp_path / "b.db", **ENABLED)
    assert "memory_propose" in on.surface().names
    # The tools map cannot switch a conditional tool on by itself.
    forced = make_runtime(workspace, tmp_path / "c.db", tools={"memory_propose": True})
    assert "memory_propose" not in forced.surface().names


async def test_proposal_is_user_mediated_and_waits_for_a_person(
    workspace: Path, tmp_path: Path
) -> None:
    rt = make_runtime(workspace, tmp_path / "z.db", **ENABLED)
    session = rt.open_session()
    result = await rt.call(
        session, "memory_propose", {"text": "Run tests with .venv/bin/pytest", "scope": "workspace"}
    )
    assert result.outcome is Outcome.OK, result.output
    assert result.declaration is not None
    assert result.declaration.effect is Effect.USER_MEDIATED
    assert "Proposed memory 1" in result.output and "no effect" in result.output
    assert result.data is not None and result.data["created"] is True
    (memory,) = list_memories(rt.store)
    assert memory.status == "proposed"
    assert memory.proposed_by == session.session_id
    assert memory.workspace == str(rt.workspace)
    # Not accepted yet: nothing reaches a new session.
    assert accepted_memories_text(rt.store, workspace) == ""


async def test_the_same_proposal_is_not_doubled(workspace: Path, tmp_path: Path) -> None:
    rt = make_runtime(workspace, tmp_path / "z.db", **ENABLED)
    s = rt.open_session()
    await rt.call(s, "memory_propose", {"text": "Use tabs", "scope": "user"})
    again = await rt.call(s, "memory_propose", {"text": "  Use tabs ", "scope": "user"})
    assert again.outcome is Outcome.OK
    assert "already proposed (id 1)" in again.output
    assert len(list_memories(rt.store)) == 1
    other_scope = await rt.call(s, "memory_propose", {"text": "Use tabs"})
    assert other_scope.data is not None and other_scope.data["created"] is True


@pytest.mark.parametrize(
    "args", [{}, {"text": ""}, {"text": "x", "scope": "global"}, {"text": "x" * 1001}]
)
async def test_bad_proposals_are_blocked(
    workspace: Path, tmp_path: Path, args: dict[str, Any]
) -> None:
    rt = make_runtime(workspace, tmp_path / "z.db", **ENABLED)
    result = await rt.call(rt.open_session(), "memory_propose", args)
    assert result.block_kind is BlockKind.INVALID_ARGUMENTS


def test_accepted_memories_text_has_user_and_this_workspace_only(tmp_path: Path) -> None:
    store = open_store(tmp_path / "z.db")
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    mine, _ = propose_memory(store, "Build with make", "workspace", here, "s1")
    theirs, _ = propose_memory(store, "Build with cargo", "workspace", elsewhere, "s2")
    personal, _ = propose_memory(store, "Answer in English", "user", here, "s1")
    refused, _ = propose_memory(store, "Delete tests freely", "workspace", here, "s1")
    for m in (mine, theirs, personal):
        decide_memory(store, m.memory_id, "accepted")
    decide_memory(store, refused.memory_id, "rejected")
    text = accepted_memories_text(store, here)
    lines = text.splitlines()
    assert lines[0].startswith("Memories the user accepted")
    assert lines[1:] == ["- [everywhere] Answer in English", "- [this workspace] Build with make"]
    assert "cargo" not in text and "Delete" not in text
    # Bounded: what does not fit is counted, not silently dropped.
    short = accepted_memories_text(store, here, max_chars=len(lines[0]) + 40)
    assert short.splitlines()[-1] == "(1 more accepted memories left out for length.)"
    store.close()


def test_deciding_an_unknown_memory_names_the_fix(tmp_path: Path) -> None:
    store = open_store(tmp_path / "z.db")
    with pytest.raises(UnknownMemory, match="no memory with id 5; `zuno memory list`"):
        decide_memory(store, 5, "accepted")
    store.close()


def test_cli_lists_accepts_and_rejects(workspace: Path, tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    rt = make_runtime(workspace, db, **ENABLED)

    async def propose() -> None:
        s = rt.open_session()
        await rt.call(s, "memory_propose", {"text": "Lint with ruff"})
        await rt.call(s, "memory_propose", {"text": "Prefers short answers", "scope": "user"})

    anyio.run(propose)
    rt.close()

    listed = zuno(db, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["id"], r["status"], r["scope"]) for r in rows] == [
        (1, "proposed", "workspace"),
        (2, "proposed", "user"),
    ]
    human = zuno(db, "list")
    assert human.returncode == 0
    assert "Lint with ruff" in human.stdout and "2 waiting" in human.stdout

    accepted = zuno(db, "accept", "1")
    assert accepted.returncode == 0, accepted.stderr
    assert "Accepted memory 1: Lint with ruff" in accepted.stdout
    rejected = zuno(db, "reject", "2", "--json")
    assert rejected.returncode == 0
    assert json.loads(rejected.stdout)["status"] == "rejected"

    only = json.loads(zuno(db, "list", "--status", "accepted", "--json").stdout)
    assert [r["id"] for r in only] == [1]

    store = open_store(db)
    assert accepted_memories_text(store, workspace).endswith("- [this workspace] Lint with ruff")
    store.close()


def test_cli_errors_are_one_clear_line(tmp_path: Path) -> None:
    db = tmp_path / "cli.db"
    missing = zuno(db, "accept", "42")
    assert missing.returncode == 2
    assert "no memory with id 42" in missing.stderr and "Traceback" not in missing.stderr
    not_a_number = zuno(db, "reject", "abc")
    assert not_a_number.returncode == 2
    assert "'abc' is not a memory id" in not_a_number.stderr
    bad_status = zuno(db, "list", "--status", "maybe")
    assert bad_status.returncode == 2
    assert "--status must be proposed, accepted or rejected" in bad_status.stderr
    empty = zuno(db, "list")
    assert empty.returncode == 0 and "No memories." in empty.stdout
