"""A session's lifecycle (zuno.session.lifecycle): what opening and releasing do, in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from zuno.policy.modes import stored_mode
from zuno.session.lifecycle import UnknownSession
from zuno.session.runtime import Runtime, UnknownAgent


def _runtime(workspace: Path, tmp_path: Path) -> Runtime:
    return Runtime(workspace, db_path=tmp_path / "z.db", tools=[])


def test_an_unknown_agent_creates_no_session(workspace: Path, tmp_path: Path) -> None:
    rt = _runtime(workspace, tmp_path)
    try:
        with pytest.raises(UnknownAgent):
            rt.open_session(agent="nobody")
        assert rt.store.list_sessions() == []
    finally:
        rt.close()


def test_a_session_is_found_by_a_unique_prefix_and_only_so(workspace: Path, tmp_path: Path) -> None:
    rt = _runtime(workspace, tmp_path)
    try:
        opened = rt.open_session(agent="explore", mode="plan")
        again = rt.open_session(opened.session_id[:12])
        # The stored agent and mode come back with it.
        assert (again.session_id, again.agent_name) == (opened.session_id, "explore")
        assert again.permissions.mode == "plan"
        with pytest.raises(UnknownSession, match="no session 'ses_nothing'"):
            rt.open_session("ses_nothing")
    finally:
        rt.close()


def test_the_lease_is_taken_with_the_first_session_and_ended_by_release(
    workspace: Path, tmp_path: Path
) -> None:
    rt = _runtime(workspace, tmp_path)
    try:
        assert rt.lifecycle.lease is None
        state = rt.open_session(mode="strict")
        assert rt.lifecycle.lease is not None
        assert stored_mode(rt.store, state.session_id) == "strict"
        row = rt.store.get_session(state.session_id)
        assert row is not None and row.owner == rt.identity
        rt.release("done")
        assert rt.lifecycle.lease is None
        row = rt.store.get_session(state.session_id)
        assert row is not None and row.state == "done"
    finally:
        rt.close()
