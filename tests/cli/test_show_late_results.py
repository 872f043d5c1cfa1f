"""``zuno show`` shows a late result beside the call it came too late for.

The rows are made through the store's own API, as tests/recovery/test_late_results.py
does: a call whose runner's lease is gone is settled ``uncertain``, then its owner's
result arrives (a ``call.late_result`` event); a background job marked lost ends
afterwards (a ``job.late_result`` event). The transcript comes from the real command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from zuno.contract.events import Event
from zuno.durability.recovery import settle_interrupted
from zuno.durability.store import SQLiteStore
from zuno.durability.store.records import CallRecord

ZUNO = Path(sys.executable).parent / "zuno"


def _make_late_results(db: Path, workspace: Path) -> None:
    store = SQLiteStore(db)
    store.create_session("ses_late", "build", str(workspace))
    runner = "w1:elsewhere:boot:1:7:7"  # a worker on another host whose lease is gone
    row = CallRecord(
        "call_late", "ses_late", 1, 0, 1, "shell", '{"command": "make test"}', "h",
        "side_effecting", "never", "exclusive", "started", started_at=time.time(), runner=runner,
    )  # fmt: skip
    store.call_started(row, Event("call.started", "ses_late", "call_late", {"attempt": 1}))
    assert settle_interrupted(store, "ses_late") == ["call_late"]
    row.status, row.outcome, row.result = "finished", "ok", "42 passed\nall green"
    row.finished_at = time.time()
    store.call_finished(row, Event("call.finished", "ses_late", "call_late", {"outcome": "ok"}))
    data = {"job_id": "job_7", "state": "succeeded", "exit_code": 0, "detail": None}
    store.append_event(
        Event("job.late_result", "ses_late", "call_late", {**data, "runner": runner})
    )
    kinds = [e.kind for e in store.events("ses_late")]
    assert kinds.count("call.late_result") == 1 and kinds.count("job.late_result") == 1
    store.close()


def _show(workspace: Path, db: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ZUNO), "show", "ses_late", *extra],
        cwd=workspace,
        env={**os.environ, "ZUNO_DB": str(db)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_show_prints_late_results_beside_the_settled_call(workspace: Path, tmp_path: Path) -> None:
    db = tmp_path / "late.db"
    _make_late_results(db, workspace)
    proc = _show(workspace, db)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    (call,) = [i for i, x in enumerate(lines) if x.startswith("  #0 shell")]
    assert "uncertain" in lines[call]
    after = "\n".join(lines[call + 1 : call + 8])
    assert "late result after it was settled uncertain: ok" in after, proc.stdout
    assert "42 passed" in after
    assert "job job_7 ended after it was marked lost: succeeded" in after, proc.stdout


def test_show_json_lists_late_results(workspace: Path, tmp_path: Path) -> None:
    db = tmp_path / "late.db"
    _make_late_results(db, workspace)
    proc = _show(workspace, db, "--json")
    assert proc.returncode == 0, proc.stderr
    body = json.loads(proc.stdout)
    late = {entry["kind"]: entry for entry in body["late_results"]}
    assert set(late) == {"call.late_result", "job.late_result"}
    assert late["call.late_result"]["call_id"] == "call_late"
    assert late["call.late_result"]["outcome"] == "ok"
    assert late["call.late_result"]["settled_as"] == "uncertain"
    assert late["call.late_result"]["result"] == "42 passed\nall green"
    assert late["job.late_result"]["job_id"] == "job_7"
    assert late["job.late_result"]["state"] == "succeeded"
    # The call row itself keeps what recovery decided.
    (row,) = body["calls"]
    assert row["outcome"] == "uncertain"
