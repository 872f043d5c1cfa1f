"""The inspection rule orders calls by the session's sequence, never by a host's clock.

A host's clock may be ahead, behind, or jump between two calls. The rule (a
side-effecting call waits, after an uncertain one, until an inspection has
*started after* it ended) must hold whatever the clocks say:

- an inspection that ran *before* the failure never counts, even when the
  clock jumped back in between (its time then reads later than the failure's);
- an inspection that ran after it always counts, even when the clock jumped
  back (its time reads earlier), so a session is never blocked for good.

In one process the clock is shifted by patching ``time.time`` in this test
process only (the store's own clock, ``zuno_now()``, keeps the real one). Across
processes each ``zuno call`` gets its shift through a ``sitecustomize`` on
``PYTHONPATH`` (see ``fault_kit``), on one SQLite store: there ``zuno_now()`` is
each process's own ``time.time``, so the hosts' clocks really disagree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zuno.config.loading import Config
from zuno.core.declarations import BlockKind, Outcome
from zuno.policy.approvals import ApproveAll
from zuno.session.runtime import Runtime

pytestmark = pytest.mark.anyio

_UNCERTAIN = {"command": "echo ran >> effects.txt; sleep 30", "timeout": 1}
"""A side-effecting command cut off by its timeout: its outcome is uncertain."""


def _runtime(workspace: Path, db: Path) -> Runtime:
    return Runtime(workspace, config=Config(), db_path=db, approver=ApproveAll())


def _shift_clock(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """This process's wall clock reads ``seconds`` off from now on (0: the real clock)."""
    monkeypatch.setattr(time, "time", lambda: _REAL_TIME() + seconds)
    monkeypatch.setattr(time, "time_ns", lambda: _REAL_TIME_NS() + int(seconds * 1e9))


_REAL_TIME = time.time
_REAL_TIME_NS = time.time_ns


@pytest.mark.parametrize("jump", [-30.0, -3600.0])
async def test_an_inspection_after_the_failure_counts_whatever_the_clock(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jump: float
) -> None:
    """The clock jumps back after the failure: the inspection still counts; nothing blocks."""
    rt = _runtime(workspace, tmp_path / "z.db")
    try:
        s = rt.open_session()
        failed = await rt.call(s, "shell", _UNCERTAIN)
        assert failed.outcome is Outcome.UNCERTAIN
        _shift_clock(monkeypatch, jump)
        refused = await rt.call(s, "write", {"path": "x.txt", "content": "x"})
        assert refused.block_kind is BlockKind.DENIED, refused.output
        assert (await rt.call(s, "read", {"path": "effects.txt"})).outcome is Outcome.OK
        allowed = await rt.call(s, "write", {"path": "x.txt", "content": "x"})
        assert allowed.outcome is Outcome.OK, allowed.output
        assert (workspace / "x.txt").read_text() == "x"
    finally:
        rt.close()


_SITE = """
import os, time
_shift = float(os.environ.get("ZUNO_TEST_CLOCK_SHIFT") or 0)
if _shift:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _shift
    time.time_ns = lambda: _time_ns() + int(_shift * 1e9)
"""


def _zuno_call(
    workspace: Path, db: Path, site: Path, shift: float, *args: str
) -> dict[str, object]:
    """``zuno call --json ARGS`` run by a process whose clock is ``shift`` seconds off."""
    env = {
        **os.environ,
        "ZUNO_DB": str(db),
        "ZUNO_TEST_CLOCK_SHIFT": str(shift),
        "PYTHONPATH": os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "zuno", "call", "--json", "--yes", *args],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A ``sitecustomize`` that shifts the clock of the processes given its folder."""
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(_SITE)
    return folder


_WRITE = json.dumps({"path": "x.txt", "content": "x"})


@pytest.mark.parametrize("shift", [30.0, 3600.0])
def test_a_failure_recorded_by_a_host_ahead_is_lifted_by_a_later_inspection(
    workspace: Path, tmp_path: Path, site: Path, shift: float
) -> None:
    """One store; the uncertain call by a process ``shift`` s ahead; the rest on time."""
    db = tmp_path / "z.db"
    failed = _zuno_call(workspace, db, site, shift, "shell", json.dumps(_UNCERTAIN))
    assert failed["outcome"] == "uncertain", failed
    session = ["--session", str(failed["session_id"])]
    refused = _zuno_call(workspace, db, site, 0.0, "write", _WRITE, *session)
    assert refused["block_kind"] == "denied", refused
    looked = _zuno_call(workspace, db, site, 0.0, "read", '{"path": "effects.txt"}', *session)
    assert looked["outcome"] == "ok", looked
    allowed = _zuno_call(workspace, db, site, 0.0, "write", _WRITE, *session)
    assert allowed["outcome"] == "ok", allowed  # before: blocked for as long as the skew
    assert (workspace / "x.txt").read_text() == "x"


@pytest.mark.parametrize("shift", [30.0, 3600.0])
def test_an_inspection_by_a_host_ahead_before_the_failure_does_not_count(
    workspace: Path, tmp_path: Path, site: Path, shift: float
) -> None:
    """A process ahead inspects, then one on time records a failure: a write is refused."""
    db = tmp_path / "z.db"
    looked = _zuno_call(workspace, db, site, shift, "read", '{"path": "."}')
    assert looked["outcome"] == "ok", looked
    session = ["--session", str(looked["session_id"])]
    failed = _zuno_call(workspace, db, site, 0.0, "shell", json.dumps(_UNCERTAIN), *session)
    assert failed["outcome"] == "uncertain", failed
    refused = _zuno_call(workspace, db, site, 0.0, "write", _WRITE, *session)
    assert refused["block_kind"] == "denied", refused  # before: the early look counted
    assert not (workspace / "x.txt").exists()


async def test_failures_stored_before_calls_had_places_still_follow_the_rule(
    workspace: Path, tmp_path: Path
) -> None:
    """A store upgraded in place: its older failure has no place, the newer ones do.

    The older failure is lifted by a later inspection (by its times, as before), and
    it never hides a newer failure that nothing inspected.
    """
    rt = _runtime(workspace, tmp_path / "z.db")
    try:
        s = rt.open_session()
        older = await rt.call(s, "shell", _UNCERTAIN)
        with rt.store.transaction() as db:  # as a Zuno before the places wrote it
            db.execute(
                "UPDATE calls SET start_seq = NULL, finish_seq = NULL WHERE call_id = ?",
                (older.call_id,),
            )
        refused = await rt.call(s, "write", {"path": "x.txt", "content": "x"})
        assert refused.block_kind is BlockKind.DENIED, refused.output
        assert (await rt.call(s, "read", {"path": "effects.txt"})).outcome is Outcome.OK
        allowed = await rt.call(s, "write", {"path": "x.txt", "content": "x"})
        assert allowed.outcome is Outcome.OK, allowed.output  # before: blocked for good
        newer = await rt.call(s, "shell", _UNCERTAIN)
        assert newer.outcome is Outcome.UNCERTAIN
        refused = await rt.call(s, "write", {"path": "y.txt", "content": "y"})
        assert refused.block_kind is BlockKind.DENIED, refused.output  # before: allowed
        assert newer.call_id in refused.output
    finally:
        rt.close()
