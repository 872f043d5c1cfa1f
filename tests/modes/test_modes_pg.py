"""A session's mode stored and read back on PostgreSQL (skipped without a server)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

from pg_schema import scratch_schema
from zuno.core.declarations import BlockKind
from zuno.durability.store import open_store
from zuno.policy.approvals import DenyAll
from zuno.policy.modes import stored_mode
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio


@pytest.fixture
def modes_dsn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with scratch_schema(tmp_path, monkeypatch, "zuno_modes") as dsn:
        yield dsn


async def test_mode_is_kept_with_the_session_on_postgresql(workspace: Path, modes_dsn: str) -> None:
    rt = Runtime(workspace, store=open_store(modes_dsn), approver=DenyAll())
    try:
        s = rt.open_session(mode="plan")
        result = await rt.call(s, "write", {"path": "x.txt", "content": "x"})
        assert result.block_kind is BlockKind.DENIED
        (row,) = rt.store.calls(s.session_id)
        assert row.mode == "plan"
        rt.set_mode(s, "accept-edits")
        assert stored_mode(rt.store, s.session_id) == "accept-edits"
    finally:
        rt.close()
    rt = Runtime(workspace, store=open_store(modes_dsn), approver=DenyAll())
    try:
        assert rt.open_session(s.session_id).permissions.mode == "accept-edits"
        assert not (workspace / "x.txt").exists()
    finally:
        rt.close()
